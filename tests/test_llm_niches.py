"""Structural niches (MAP-Elites style inspiration): the descriptor names what a kernel engineer
sees in the real catalog kernels, the archive keeps the best per niche, and a prompt's
inspirations come from other niches than CURRENT's, even when every faster kernel shares
CURRENT's structure, labelled with their structure and measured value in the objective's unit."""

from __future__ import annotations

import random
import re
import time

from llm_server import ChatServer, Reply
from project_paths import ROOT

from app.core.types import Evaluation
from app.goal import Goal
from app.llm.agent import LLMAgent, candidate_key
from app.llm.client import LLMClient
from app.llm.lessons import LessonBook
from app.llm.niches import SHUFFLE_HELPERS, niche_elites, pick_inspirations, structure
from app.llm.normal import normalise
from app.llm.settings import LLMSettings
from app.llm.spec import kernel_spec
from app.swarm.blackboard import Blackboard

C_KERNELS = ROOT / "app" / "catalog" / "cpu" / "kernels"
CU_KERNELS = ROOT / "app" / "catalog" / "cuda" / "kernels"


def _c(name: str) -> dict:
    return dict(structure((C_KERNELS / name).read_text(), "c").features)


def _cu(name: str) -> dict:
    return dict(structure((CU_KERNELS / name).read_text(), "cuda").features)


def test_c_catalog_kernels_fall_in_the_niches_an_engineer_would_name():
    # BLIS-style GEMM: OpenMP region, AVX intrinsics, cache blocking by KC/MC/NC over two
    # tile levels, A and B packed into local panels
    gemm = _c("cpu_gemm.c")
    assert gemm == {"isa": "AVX-512 intrinsics", "threads": "OpenMP parallel region",
                    "tiles": 2, "staging": "packed buffers", "nests": 3}
    # the naive reference: serial scalar triple loop
    assert _c("cpu_reference.c")["threads"] == "serial" and _c("cpu_reference.c")["isa"] == "scalar"
    # transpose walks square tiles (inner loops start at r0 / c0)
    assert _c("cpu_transpose.c")["tiles"] == 1
    # row-wise softmax: parallel rows, omp simd inner loops, no tiles
    soft = _c("cpu_softmax.c")
    assert soft["threads"] == "OpenMP parallel for" and soft["isa"] == "SIMD pragmas"
    assert not soft["tiles"]


def test_an_intrinsics_rewrite_and_the_pragma_template_are_different_niches():
    """Both used to be 'explicit SIMD', so the template filled the slots."""
    template = (C_KERNELS / "cpu_softmax.c").read_text()
    avx = ("#include <immintrin.h>\nvoid ks_kernel(float *y, const float *x, long r, long c) {\n"
           "#pragma omp parallel for\nfor (long i = 0; i < r; ++i) {\n"
           "for (long j = 0; j + 16 <= c; j += 16) _mm512_storeu_ps(y + i * c + j, "
           "_mm512_loadu_ps(x + i * c + j)); } }\n")
    assert structure(avx, "c") != structure(template, "c")
    assert "AVX-512 intrinsics" in structure(avx, "c").label
    assert "SIMD pragmas" in structure(template, "c").label


def test_cuda_catalog_kernels_fall_in_the_niches_an_engineer_would_name():
    tc, f32 = _cu("gemm_tc.cu"), _cu("gemm_f32.cu")
    assert (tc["tensor"], tc["staging"], tc["vector"]) == ("mma.sync", "cp.async", True)
    assert (f32["tensor"], f32["staging"], f32["shuffle"]) == ("none", "shared memory", False)
    wg = _cu("gemm_wgmma.cu")
    assert (wg["tensor"], wg["staging"]) == ("wgmma", "TMA")
    assert _cu("bias_gelu.cu")["staging"] == "registers" and _cu("kda.cu")["kernels"] == 3
    # the row reductions call the shared header's warp reductions: they shuffle
    for name in ("softmax.cu", "layernorm.cu", "rmsnorm.cu"):
        assert _cu(name)["shuffle"] and _cu(name)["staging"] == "shared memory", name


def test_the_shuffle_helpers_are_the_shared_headers_warp_reductions():
    header = (CU_KERNELS / "common.cuh").read_text()
    for helper in SHUFFLE_HELPERS:
        m = re.search(rf"\b{helper}\s*\([^)]*\)\s*\{{(.*?)\n\}}", header, re.DOTALL)
        assert m, helper
        body = m.group(1)
        assert "__shfl" in body or any(h in body for h in SHUFFLE_HELPERS if h != helper), helper


def test_comments_and_cosmetics_do_not_move_a_kernel_between_niches():
    src = (C_KERNELS / "cpu_softmax.c").read_text()
    serial = re.sub(r"^#pragma omp parallel[^\n]*\n", "", src, flags=re.MULTILINE)
    assert structure(serial, "c") != structure(src, "c")
    assert dict(structure(serial, "c").features)["threads"] == "serial"
    # a pragma named in a comment is not a pragma; the normal form is the same niche
    commented = "/* #pragma omp parallel for  __m256 _mm256_add_ps */\n" + serial
    assert structure(commented, "c") == structure(serial, "c")
    assert structure(normalise(src), "c") == structure(src, "c")
    assert structure(src, "c").label == ("OpenMP parallel for, SIMD pragmas, untiled, direct, "
                                         "3+ loop nest(s)")


def _ev(key: str, value: float, source: str | None) -> Evaluation:
    return Evaluation(key=key, config={}, ok=True, value=value, source=source)


def test_the_archive_keeps_the_best_per_niche_and_inspirations_come_from_other_niches():
    src = (C_KERNELS / "cpu_softmax.c").read_text()
    serial = re.sub(r"^#pragma omp parallel[^\n]*\n", "", src, flags=re.MULTILINE)
    gemm = (C_KERNELS / "cpu_gemm.c").read_text()
    evals = [_ev("best", 1.0, src), _ev("fast2", 1.1, src + "\n"), _ev("fast3", 1.2, src),
             _ev("serial-slow", 9.0, serial), _ev("serial", 4.0, serial),
             _ev("gemm", 20.0, gemm),
             Evaluation(key="broken", config={}, ok=False, source=gemm + "x")]
    niche = {e.key: structure(e.source, "c") for e in evals}
    archive = niche_elites(evals, lambda e: niche[e.key], lambda e: e.value)
    assert sorted(e.key for e in archive.values()) == ["best", "gemm", "serial"]
    fastest = sorted((e for e in evals if e.ok), key=lambda e: e.value)
    for seed in range(5):
        picked = pick_inspirations(archive, niche["best"], "best", 2, random.Random(seed),
                                   lambda e: e.value, fallback=fastest)
        # the two top-by-speed (fast2, fast3) share CURRENT's structure: neither is shown
        assert [e.key for e in picked] == ["serial", "gemm"]
    # with one other niche, the fastest others fill the rest
    small = {n: e for n, e in archive.items() if e.key != "gemm"}
    picked = pick_inspirations(small, niche["best"], "best", 2, random.Random(0),
                               lambda e: e.value, fallback=fastest)
    assert [e.key for e in picked] == ["fast2", "serial"]


def test_the_prompt_shows_an_elite_of_another_niche_with_its_structure_and_unit():
    goal = Goal(name="niches", operator="softmax", backend="cpu", shapes=[[8, 100]])
    spec = kernel_spec(goal)
    space = spec.operator.space("float32")
    rng = random.Random(0)
    configs = []
    while len(configs) < 4:
        cfg = space.sample(rng)
        if cfg not in configs:
            configs.append(cfg)
    serial = normalise(re.sub(r"^#pragma omp parallel[^\n]*\n", "", spec.template,
                              flags=re.MULTILINE))
    with ChatServer(default=Reply("no code here")) as srv:
        s = LLMSettings(base_url=srv.base_url, model="scripted", timeout_s=5, backoff_s=0.01,
                        max_retries=0)
        agent = LLMAgent(space, random.Random(0), role="memory", client=LLMClient(s, api_key="k"),
                         spec=spec, goal=goal, book=LessonBook(goal, "test cpu", generation=1),
                         device="Test CPU", exhausted_wait_s=1)
        board = Blackboard(space)
        # three template configurations, all faster than the serial rewrite: the top two
        # after the best (what a speed-only pick shows) are both of CURRENT's structure
        evals = [Evaluation(key=space.key(c), config=c, ok=True, value=v)
                 for c, v in zip(configs[:3], (1.0, 1.1, 1.2))]
        evals.append(Evaluation(key=candidate_key(configs[3], serial), config=configs[3],
                                ok=True, value=3.5, source=serial, agent="llm-tiling"))
        for e in evals:
            board.claim(e.key)
            board.record(e)
            agent.observe(e)
        agent.propose(board, 1)
        t_end = time.monotonic() + 5
        while not srv.requests and time.monotonic() < t_end:
            time.sleep(0.05)
        agent.close()
    prompt = srv.requests[0]["messages"][1]["content"]
    assert "structure: OpenMP parallel for, SIMD pragmas, untiled" in prompt
    inspiration = prompt[prompt.index("ANOTHER GOOD KERNEL for inspiration"):]
    assert f"3.5 {spec.unit}".rstrip() in inspiration.split("\n")[0]
    assert "structure: serial, SIMD pragmas" in inspiration.split("\n")[0]
    # the other slot stays empty: the faster kernels are CURRENT's own code at other tunings
    # which the tunables search covers and a prompt need not repeat
    assert "ANOTHER GOOD CONFIGURATION" not in prompt and "time 1.1 ms" not in prompt


def test_tensor_cores_through_the_shared_headers_helpers_are_the_mma_niche():
    """gemm_tc.cu calls ampere.cuh's ldmatrix_x4/mma16816 and gemm_wgmma.cu hopper.cuh's
    wgmma_m64... helpers: both are tensor-core kernels, as an engineer would say."""
    assert _cu("gemm_wgmma.cu")["tensor"] == "wgmma"
    assert _cu("gemm_tc.cu")["tensor"] == "mma.sync"
