"""The diversity archive: inspirations are distinct, by normal form, from
CURRENT and from each other, whatever fills the slots (other niches or the fastest overall)."""

from __future__ import annotations

import random

from project_paths import ROOT

from app.core.types import Evaluation
from app.llm.features import features
from app.llm.niches import niche_elites, pick_inspirations, structure
from app.llm.normal import normalise

C_KERNELS = ROOT / "app" / "catalog" / "cpu" / "kernels"


def _ev(key: str, value: float, source: str | None) -> Evaluation:
    return Evaluation(key=key, config={"k": key}, ok=True, value=value, source=source)


def test_no_inspiration_repeats_current_or_another_inspiration():
    template = (C_KERNELS / "cpu_softmax.c").read_text()
    other = (C_KERNELS / "cpu_gemm.c").read_text()
    evals = [_ev("current", 1.0, template),
             _ev("same-code", 1.05, "/* retuned */\n" + template),  # CURRENT, another tuning
             _ev("other", 2.0, other),
             _ev("other-again", 2.1, other + "\n// same code, other tuning\n")]
    niche = {e.key: structure(e.source, "c") for e in evals}
    archive = niche_elites(evals, lambda e: niche[e.key], lambda e: e.value)
    fastest = sorted(evals, key=lambda e: e.value)
    for seed in range(6):
        picked = pick_inspirations(archive, niche["current"], "current", 2, random.Random(seed),
                                   lambda e: e.value, fallback=fastest,
                                   identity=lambda e: normalise(e.source),
                                   current_identity=normalise(template))
        assert [e.key for e in picked] == ["other"]


def test_a_template_configuration_is_not_shown_when_current_is_the_template():
    src = "void ks_kernel(float *y) { y[0] = 1; }\n"
    cur = _ev("cur", 1.0, None)
    alt = _ev("alt", 1.2, None)  # the template at another tuning: same code
    llm = _ev("llm", 3.0, "void ks_kernel(float *y) {\n#pragma omp parallel for\n"
                          "for (int i = 0; i < 1; ++i) y[i] = 1; }\n")
    ident = {"cur": normalise(src), "alt": normalise(src), "llm": normalise(llm.source)}
    picked = pick_inspirations({}, None, "cur", 2, random.Random(0), lambda e: e.value,
                               fallback=[cur, alt, llm], identity=lambda e: ident[e.key],
                               current_identity=ident["cur"])
    assert [e.key for e in picked] == ["llm"]


def test_structural_features_name_isa_threading_tiling_staging_and_fusion():
    f = features((C_KERNELS / "cpu_gemm.c").read_text(), "c")
    assert f["isa"] == "AVX-512 intrinsics" and f["tiles"] == 2
    assert f["staging"] == "packed buffers" and f["threads"] == "OpenMP parallel region"
    fused = "void ks_kernel(float *y, const float *x, long n) {\nfor (long i = 0; i < n; ++i) y[i] = x[i] * 2 + 1;\n}\n"
    split = ("void ks_kernel(float *y, const float *x, long n) {\nfor (long i = 0; i < n; ++i) y[i] = x[i] * 2;\n"
             "for (long i = 0; i < n; ++i) y[i] += 1;\n}\n")
    assert features(fused, "c")["nests"] == 1 and features(split, "c")["nests"] == 2
    assert structure(fused, "c") != structure(split, "c")
