"""The Summary tab says what each figure is, with its unit (raw keys such as
`load_after`, `noisy 1` and `gbs`)."""

from __future__ import annotations

from app.core.types import Evaluation
from app.ui.candidate_tabs import summary_html


def test_summary_rows_are_words_with_units():
    ev = Evaluation(key="k", config={"TILE": 8}, ok=True, value=1.0, time_ms=1.0, agent="explorer",
                    metrics={"gbs": 12.1, "noisy": 1.0, "load_before": 3.0, "load_after": 3.5,
                             "samples": 9, "spread": 0.2, "cpu_count": 2, "odd_new_pct": 40.0},
                    resources={"registers": 32})
    text = summary_html(ev)
    for raw in (">gbs<", ">noisy<", ">load_after<", ">samples<", ">cpu_count<", "odd_new_pct", "param:",
                "resource:"):
        assert raw not in text, raw
    for shown in ("memory throughput", "12.1 GB/s", "machine busy while timed</b></td><td>yes",
                  "load average after timing</b></td><td>3.50", "20 % of median", "CPU cores",
                  "odd new</b></td><td>40 %", "registers per thread", "parameter TILE"):
        assert shown in text, shown
