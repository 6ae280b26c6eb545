"""GPU telemetry through NVML (nvidia-ml-py): clocks, temperature, power, utilisation, memory,
throttle reasons. Sampled on a background thread during a run and published as
app.core.events.Telemetry. Without a GPU or NVML it says so once and keeps working."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from app.gpu.cuda.timing import ThrottleSnapshot, throttle_reasons

log = logging.getLogger(__name__)

_lock = threading.Lock()
_state: dict[str, Any] = {"initialised": False, "error": None}


def nvml() -> tuple[Any, str | None]:
    """(pynvml module, None) when NVML works here, else (None, a plain sentence why not)."""
    with _lock:
        if _state["initialised"]:
            return _state["module"], None
        if _state["error"] is not None:
            return None, _state["error"]
        try:
            import pynvml
        except ImportError:
            _state["error"] = "NVML is not available: nvidia-ml-py is not installed"
            return None, _state["error"]
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
            _state["error"] = f"no NVIDIA GPU telemetry: NVML could not start ({exc})"
            return None, _state["error"]
        _state.update(initialised=True, module=pynvml)
        return pynvml, None


def probe_driver() -> tuple[bool, str]:
    """Whether an NVIDIA driver and GPUs answer here, and which (for `kernelswarm devices`)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                     for i in range(pynvml.nvmlDeviceGetCount())]
            driver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - no driver, no library: say so, don't fail
        return False, f"no NVIDIA driver ({type(exc).__name__}: {exc})"
    gpus = ", ".join(f"{i}: {n if isinstance(n, str) else n.decode()}" for i, n in enumerate(names))
    return bool(names), f"driver {driver}; {gpus or 'no GPUs'}"


def _device(index: int) -> tuple[Any, Any] | None:
    """(NVML, the device's handle); None without NVML or for a device NVML cannot see."""
    mod, _ = nvml()
    if mod is None:
        return None
    try:
        return mod, mod.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - a device NVML cannot see
        return None


def _answers(probes: Any, convert: Callable[[Any], Any]) -> dict[str, Any]:
    """{key: convert(probe())} for each probe that answers."""
    out = {}
    for key, probe in probes:
        with contextlib.suppress(Exception):  # not every GPU answers every probe
            out[key] = convert(probe())
    return out


# NVML's cumulative violation counters (nvmlDeviceGetViolationStatus) that mean throttling: heat,
# board limits (hardware slowdown, power brake) and the reliability limit. Not POWER: that is the
# software power cap, the normal state of a bf16 GEMM on an H100/H200.
THROTTLE_POLICIES = {"thermal": "NVML_PERF_POLICY_THERMAL", "board_limit": "NVML_PERF_POLICY_BOARD_LIMIT",
                     "reliability": "NVML_PERF_POLICY_RELIABILITY"}


class ThrottleProbe:
    """Reads one device's throttle state. Calling it gives the clock-event mask (cheap);
    `snapshot()` adds the cumulative violation counters and the SM clock, for the timer to
    compare before and after each batch of samples. Without NVML: mask 0, empty snapshots."""

    def __init__(self, mod: Any = None, handle: Any = None) -> None:
        self.mod, self.handle = mod, handle
        self.policies = {name: getattr(mod, const) for name, const in THROTTLE_POLICIES.items()
                         if mod is not None and hasattr(mod, const)}

    def __call__(self) -> int:
        if self.mod is None:
            return 0
        for getter in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            with contextlib.suppress(Exception):  # older NVML or driver: try the older name
                return int(getattr(self.mod, getter)(self.handle))
        return 0

    def snapshot(self) -> ThrottleSnapshot:
        if self.mod is None:
            return ThrottleSnapshot()
        violations: dict[str, int] = {}
        for name, policy in list(self.policies.items()):
            try:
                violations[name] = int(self.mod.nvmlDeviceGetViolationStatus(self.handle, policy).violationTime)
            except Exception:  # noqa: BLE001 - not supported on this GPU: stop asking
                del self.policies[name]
        try:
            clock: float | None = float(self.mod.nvmlDeviceGetClockInfo(self.handle, self.mod.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001 - the clock is a record, not a must
            clock = None
        return ThrottleSnapshot(mask=self(), violation_ns=violations, sm_clock_mhz=clock)


def throttle_mask_fn(index: int) -> ThrottleProbe:
    """The device's throttle probe (a callable returning the clock-event mask, 0 without NVML
    or for a device NVML cannot see)."""
    found = _device(index)
    return ThrottleProbe(*found) if found else ThrottleProbe()


def read(index: int) -> dict[str, float]:
    """One reading of the device's state; keys missing when NVML cannot give them."""
    found = _device(index)
    if found is None:
        return {}
    mod, h = found
    out: dict[str, float] = _answers([
        ("sm_clock_mhz", lambda: mod.nvmlDeviceGetClockInfo(h, mod.NVML_CLOCK_SM)),
        ("mem_clock_mhz", lambda: mod.nvmlDeviceGetClockInfo(h, mod.NVML_CLOCK_MEM)),
        ("max_sm_clock_mhz", lambda: mod.nvmlDeviceGetMaxClockInfo(h, mod.NVML_CLOCK_SM)),
        ("temperature_c", lambda: mod.nvmlDeviceGetTemperature(h, mod.NVML_TEMPERATURE_GPU)),
        ("power_w", lambda: mod.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ("power_limit_w", lambda: mod.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
        ("gpu_util_pct", lambda: mod.nvmlDeviceGetUtilizationRates(h).gpu),
        ("mem_util_pct", lambda: mod.nvmlDeviceGetUtilizationRates(h).memory),
        ("mem_used_mb", lambda: mod.nvmlDeviceGetMemoryInfo(h).used / 2**20),
        ("mem_total_mb", lambda: mod.nvmlDeviceGetMemoryInfo(h).total / 2**20),
    ], float)
    mask = throttle_mask_fn(index)()
    out["clock_event_mask"] = float(mask)
    out["throttled"] = 1.0 if throttle_reasons(mask) else 0.0
    return out


def device_identity(index: int) -> dict[str, str]:
    """Name, UUID and driver version from NVML (empty without NVML)."""
    found = _device(index)
    if found is None:
        return {}
    mod, h = found
    return _answers((("name", lambda: mod.nvmlDeviceGetName(h)),
                     ("uuid", lambda: mod.nvmlDeviceGetUUID(h)),
                     ("driver", lambda: mod.nvmlSystemGetDriverVersion())),
                    lambda v: v.decode() if isinstance(v, bytes) else str(v))


class TelemetrySampler:
    """Samples the devices every `interval_s` on a daemon thread and publishes Telemetry events
    on `bus`. Keeps the latest reading per device for whoever asks (`latest`)."""

    def __init__(self, devices: list[int], bus: Any = None, interval_s: float = 1.0,
                 run_id: int | None = None) -> None:
        self.devices, self.bus = list(devices), bus
        self.interval_s, self.run_id = interval_s, run_id
        self.latest: dict[int, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        _, self.unavailable = nvml()

    @property
    def available(self) -> bool:
        return self.unavailable is None

    def sample_once(self) -> dict[int, dict[str, float]]:
        from app.core.events import Telemetry

        for d in self.devices:
            reading = read(d)
            if not reading:
                continue
            self.latest[d] = reading
            if self.bus is not None:
                self.bus.publish(Telemetry(device=f"cuda:{d}", readings=reading, run_id=self.run_id))
        return dict(self.latest)

    def start(self) -> TelemetrySampler:
        if not self.available:
            log.info("%s; the run continues without telemetry", self.unavailable)
            return self
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # a telemetry hiccup must never stop a run
                log.debug("telemetry sample failed", exc_info=True)
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
