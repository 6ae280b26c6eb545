"""Extraction takes the final answer, in the shapes real models reply in: reasoning models
(<think> drafts before the answer, or only the closing tag), chat models (before/after pairs,
explanation blocks in other languages, usage snippets), diff-style answers."""

from __future__ import annotations

import pytest

from app.llm.extract import ExtractionError, extract

OLD = """#include <math.h>
void ks_kernel(float *restrict y, const float *restrict x, long n) {
    for (long i = 0; i < n; ++i) y[i] = 2.0f * x[i];
}
"""
DRAFT = OLD.replace("2.0f * x[i]", "x[i] + x[i] /* draft, longer, with a long comment */")
NEW = OLD.replace("    for (long i", "#pragma omp simd\n    for (long i")


def test_a_think_draft_never_beats_the_final_answer():
    reply = (f"<think>\nLet me try this first:\n```c\n{DRAFT}```\nHmm, no. Better to vectorise."
             f"\n</think>\n\nIdea: vectorise\n```c\n{NEW}```\n")
    got = extract(reply, OLD, "ks_kernel")
    assert got.source == NEW and got.idea == "vectorise"


def test_only_a_closing_think_tag_as_some_servers_send_it():
    reply = f"reasoning here\n```c\n{DRAFT}```\n</think>\n```c\n{NEW}```"
    assert extract(reply, OLD, "ks_kernel").source == NEW


def test_a_reply_cut_off_inside_its_reasoning_says_so():
    with pytest.raises(ExtractionError, match="inside its reasoning"):
        extract(f"<think>\nfirst idea\n```c\n{DRAFT}```\nand then", OLD, "ks_kernel", truncated=True)


def test_edits_inside_reasoning_are_ignored():
    reply = ("<thinking>\n<<<<<<< SEARCH\nnot there\n=======\nx\n>>>>>>> REPLACE\n</thinking>\n"
             f"```c\n{NEW}```")
    assert extract(reply, OLD, "ks_kernel").source == NEW


@pytest.mark.parametrize("before_label", ["Before:", "**Original code:**", "The current kernel:"])
def test_before_after_pairs_pick_the_after_block(before_label):
    reply = f"{before_label}\n```c\n{DRAFT}```\nAfter:\n```c\n{NEW}```\n"
    assert extract(reply, OLD, "ks_kernel").source == NEW
    # the "after" first and the "before" later for reference: still the new one
    reply = f"Optimised version:\n```c\n{NEW}```\nFor reference, the original:\n```c\n{DRAFT}```\n"
    assert extract(reply, OLD, "ks_kernel").source == NEW


def test_a_usage_snippet_that_calls_the_entry_does_not_win():
    reply = f"```c\n{NEW}```\nCall it like this:\n```c\nks_kernel(y, x, n);\n```\n"
    assert extract(reply, OLD, "ks_kernel").source == NEW


def test_blocks_in_other_languages_do_not_read_as_an_unclosed_block():
    reply = "Build with:\n```bash\ngcc -O3 k.c\n```\nand check with\n```python\nprint(1)\n```"
    with pytest.raises(ExtractionError, match=r"not C/CUDA \(bash, python\)"):
        extract(reply, OLD, "ks_kernel")
    ok = f"```python\nimport numpy\n```\n```c\n{NEW}```"
    assert extract(ok, OLD, "ks_kernel").source == NEW


def test_a_unified_diff_is_applied_to_the_current_source():
    reply = ("Idea: simd\n```diff\n--- a/kernel.c\n+++ b/kernel.c\n@@ -1,3 +1,4 @@\n"
             " void ks_kernel(float *restrict y, const float *restrict x, long n) {\n"
             "+#pragma omp simd\n"
             "     for (long i = 0; i < n; ++i) y[i] = 2.0f * x[i];\n```\n")
    got = extract(reply, OLD, "ks_kernel")
    assert got.kind == "edit" and got.source == NEW


def test_a_diff_that_does_not_apply_says_where():
    reply = "```diff\n@@ -1 +1 @@\n-not in the kernel\n+x\n```"
    with pytest.raises(ExtractionError, match="not found"):
        extract(reply, OLD, "ks_kernel")


def test_chat_model_prose_around_a_single_block():
    reply = (f"Sure! Here's an optimized version of your kernel.\n\n**Idea:** vectorise the loop\n\n"
             f"```cpp\n{NEW}```\n\n### Explanation\n- `#pragma omp simd` lets the compiler ...")
    got = extract(reply, OLD, "ks_kernel")
    assert got.source == NEW and got.idea == "vectorise the loop"
