"""Every candidate of a run: the table (app.ui.candidate_table) and the detail panel
(app.ui.candidate_detail), importable from here."""

from app.ui.candidate_detail import (  # noqa: F401
    CandidateDetail,
    TimingHistogram,
    config_diff_html,
    highlight_diff,
    highlight_source,
    source_language,
)
from app.ui.candidate_table import (  # noqa: F401
    COLUMNS,
    DEVICE_COLUMN,
    RESOURCE_COLUMNS,
    SORT_ROLE,
    CandidateModel,
    CandidateTable,
    device_note,
    measurement_note,
    ordered_config,
    parameter_order,
    params_text,
    recorded_parameter_order,
    shared_memory_bytes,
)
