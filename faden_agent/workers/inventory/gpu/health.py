"""Each GPU's health through NVML (ECC, retired pages, remapped rows, clock events, NVLink,
PCIe, fabric, recovery action, persistence, temperature, its Xid log) and its verdict
(gpu/rules.py). One HealthReader per GPU probe remembers counters between rounds to see
them rise and a reset happen (gpu/holds.py); steady values go in the content hash, gauges
under "usage"."""

from __future__ import annotations

import collections
import ctypes
import time
from collections.abc import Callable
from typing import Any

from faden_agent.workers.inventory.gpu import rules as gpu_rules
from faden_agent.workers.inventory.gpu.holds import reset_sign
from faden_agent.workers.inventory.gpu.xids import XidLog

LOST_CODES = (15, 16, 28)  # NVML_ERROR_GPU_IS_LOST, _RESET_REQUIRED, _GPU_NOT_FOUND

# nvml.h's field ids: one nvmlDeviceGetFieldValues call per GPU reads all counters.
FIELDS = {
    "ecc_current": 1,
    "ecc_corrected_volatile": 3,
    "ecc_uncorrected_volatile": 4,
    "ecc_corrected_aggregate": 5,
    "ecc_uncorrected_aggregate": 6,
    "retired_single_bit": 29,
    "retired_double_bit": 30,
    "retired_pending": 31,
    "nvlink_crc_flit": 38,
    "nvlink_crc_data": 45,
    "nvlink_replay": 52,
    "nvlink_recovery": 59,
    "nvlink_links": 91,
    "memory_temperature": 82,
    "pcie_replay": 94,
    "recovery_action": 230,
}
TEMPERATURE_THRESHOLDS = {"shutdown": 0, "slowdown": 1, "memory_max": 2}  # NVML_TEMPERATURE_THRESHOLD_*
PCIE_WINDOW_S = 60.0  # the replay rate's window: DCGM counts replays per minute
NVLINK_STATE_FIELD = 165  # NVML_FI_DEV_NVLINK_GET_STATE, scopeId: the link
MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS
LINK_UP = (1, 2)  # NVML_NVLINK_STATE_ACTIVE, _SLEEP (a sleeping link wakes on traffic)
NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}  # NVML_NVLINK_ERROR_DL_*
CLOCK_EVENTS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
FABRIC_STATES = {0: None, 1: "not_started", 2: "in_progress", 3: "completed"}
RECOVERY_ACTIONS = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}


class _Track:
    """What one GPU looked like in earlier rounds."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.rose_at: dict[str, float] = {}
        self.clock_since: dict[str, float] = {}
        self.links_up: set[int] = set()
        self.link_errors: dict[int, dict[str, int | None]] = {}
        self.link_totals: tuple[int | None, ...] = ()
        self.links = 0  # NVLink count of the last round: its states ride in the fields call
        self.pcie_max: tuple[Any, Any] | None = None
        self.pcie_samples: collections.deque[tuple[float, int]] = collections.deque(maxlen=64)
        self.thresholds: dict[str, int | None] | None = None  # read once: a board's limits do not move
        self.view: dict[str, Any] = {}  # what a reset changes, as last read (gpu/holds.py, reset_sign)
        self.read_at: float | None = None
        self.facts: dict[str, Any] = {}  # of the last good read: a verdict again without NVML
        self.health: dict[str, Any] = {}


class HealthReader:
    def __init__(
        self,
        xids: XidLog | None = None,
        throttle_s: float = 60.0,
        rising_s: float = 600.0,
        xid_hold_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ):
        """`xids` brings its Holds (the boot id, GPU_XID_HOLD_SEC); `xid_hold_s` only for a new one."""
        self.xids = xids or XidLog(hold_s=xid_hold_s)
        self.holds = self.xids.holds
        self.throttle_s = throttle_s
        self.rising_s = rising_s
        self.clock = clock
        self._tracks: dict[str, _Track] = {}
        self.checks: dict[str, dict[str, Any]] = {}  # uuid -> its last check (gpu.check, gpu.reset)

    # --- a GPU NVML answers for

    def read(
        self, nvml: Any, handle: Any, uuid: str, optional: Callable[..., Any], temperature: int | None = None
    ) -> dict[str, Any]:
        now = self.clock()
        track = self._tracks.setdefault(uuid, _Track())

        def call(name: str, *args: Any) -> Any:
            fn = getattr(nvml, name, None)  # older bindings lack the newer functions
            return optional(fn, handle, *args) if fn is not None else None

        values = self._fields(call, track)
        remap = call("nvmlDeviceGetRemappedRows")
        mask = call("nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None:
            mask = call("nvmlDeviceGetCurrentClocksThrottleReasons")
        persistence = call("nvmlDeviceGetPersistenceMode")
        mig = call("nvmlDeviceGetMigMode")
        histogram = call("nvmlDeviceGetRowRemapperHistogram")
        if track.pcie_max is None:
            track.pcie_max = (call("nvmlDeviceGetMaxPcieLinkGeneration"), call("nvmlDeviceGetMaxPcieLinkWidth"))
        if track.thresholds is None:
            track.thresholds = {
                n: call("nvmlDeviceGetTemperatureThreshold", t) for n, t in TEMPERATURE_THRESHOLDS.items()
            }
        pcie = {
            "replay": values["pcie_replay"],
            "width": call("nvmlDeviceGetCurrPcieLinkWidth"),
            "gen_max": track.pcie_max[0],
            "width_max": track.pcie_max[1],
        }
        facts: dict[str, Any] = {"pcie": pcie}
        remapped = _remapped_rows(remap)
        recovery = RECOVERY_ACTIONS.get(values["recovery_action"], values["recovery_action"])
        self._look_for_reset(uuid, track, now, values, remapped, recovery)
        health: dict[str, Any] = {
            "xid": self.xids.of(uuid),
            "persistence_mode": bool(persistence) if persistence is not None else None,
            "ecc_errors": _some(
                {
                    "uncorrected_volatile": values["ecc_uncorrected_volatile"],
                    "uncorrected_aggregate": values["ecc_uncorrected_aggregate"],
                }
            ),
            "retired_pages": _some(
                {
                    "single_bit": values["retired_single_bit"],
                    "double_bit": values["retired_double_bit"],
                    "pending": _bool(values["retired_pending"]),
                }
            ),
            "remapped_rows": remapped,
            "nvlink": self._nvlink(call, values, track, facts),
            "pcie": _some(pcie),
            "fabric": self._fabric(nvml, call),
            "recovery_action": recovery,
            "temperature_limits": _some(dict(track.thresholds)),
            "last_reset": self.holds.last_reset(uuid),
            "last_check": self.checks.get(uuid),
        }
        clock_events = self._clock_events(mask, track, now)
        facts.update(
            recent_xids=self._recent(uuid, health["xid"], now),
            remap_failure=bool(remapped and remapped["failure"]),
            remap_pending=bool(remapped and remapped["pending"]),
            retired_pending=bool(values["retired_pending"]),
            recovery_action=recovery,
            fabric=health["fabric"],
            throttled=[n for n in gpu_rules.THROTTLE_SLOWDOWNS if clock_events.get(n, 0) > self.throttle_s],
            power_brake="hw_power_brake_slowdown" in clock_events,
            retired_total=sum(v for v in (values["retired_single_bit"], values["retired_double_bit"]) if v),
            uncorrected_aggregate=values["ecc_uncorrected_aggregate"],
            remap_none_left=getattr(histogram, "none", None),
            ecc_off=values["ecc_current"] == 0,
            persistence_off=persistence == 0,
            mig_pending=bool(mig) and mig[0] != mig[1],
            uncorrected_rising=self._rising(track, "ecc_uncorrected_volatile", values, now),
            pcie_rising=self._pcie_rate(track, values["pcie_replay"], now),
            nvlink_rising=[n for n in NVLINK_COUNTERS if self._rising(track, f"nvlink_{n}", values, now)],
            temperature={"gpu": temperature, "memory": values["memory_temperature"], **track.thresholds},
            **self.check_facts(uuid),
        )
        health["verdict"], health["reasons"] = gpu_rules.verdict(facts)
        track.facts = facts
        health["usage"] = {
            "ecc_corrected_volatile": values["ecc_corrected_volatile"],
            "ecc_corrected_aggregate": values["ecc_corrected_aggregate"],
            "pcie_gen": call("nvmlDeviceGetCurrPcieLinkGeneration"),
            "memory_temperature_c": values["memory_temperature"],
            "clock_events_active_s": clock_events,
            "xid_totals": self.xids.totals(uuid),  # a counter: under usage, out of the hash
        }
        track.health = _ordered(health)
        return track.health

    def _look_for_reset(
        self,
        uuid: str,
        track: _Track,
        now: float,
        values: dict[str, Any],
        remapped: dict[str, Any] | None,
        recovery: Any,
    ) -> None:
        """Compares what a reset changes with the last read; a reset seen ends the holds of
        the Xids before the last read (one between the two reads may have come after it)."""
        view = {
            "failing": None,
            "ecc_corrected_volatile": values["ecc_corrected_volatile"],
            "ecc_uncorrected_volatile": values["ecc_uncorrected_volatile"],
            "retired_pending": _bool(values["retired_pending"]),
            "remap_pending": remapped["pending"] if remapped else None,
            "recovery_action": recovery,
        }
        self._seen(uuid, track, view, now)

    def _seen(self, uuid: str, track: _Track, view: dict[str, Any], now: float) -> None:
        sign = reset_sign(track.view, view) if track.view else None
        if sign is not None:
            self.holds.reset_seen(uuid, sign, at=track.read_at if track.read_at is not None else now)
        track.view = {**track.view, **{k: v for k, v in view.items() if v is not None or k == "failing"}}
        track.read_at = now

    def _fields(self, call: Callable[..., Any], track: _Track) -> dict[str, Any]:
        """Every counter, and each NVLink's state, in one nvmlDeviceGetFieldValues call (a
        second one only when the link count differs from the last round's)."""
        values: dict[str, Any] = dict.fromkeys(FIELDS)
        answers = call("nvmlDeviceGetFieldValues", [*FIELDS.values(), *_link_states(track.links)])
        for name, answer in zip(FIELDS, answers or (), strict=False):
            if answer.nvmlReturn == 0:
                values[name] = _field_number(answer)
        states = list(answers or ())[len(FIELDS) :]
        links = min(values["nvlink_links"] or 0, MAX_LINKS)  # a wild count must not cost a wild loop
        values["nvlink_links"] = links
        if links != track.links:
            track.links = links
            states = list(call("nvmlDeviceGetFieldValues", _link_states(links)) or ()) if links else []
        values["link_states"] = [_field_number(a) if a.nvmlReturn == 0 else None for a in states]
        return values

    def _nvlink(
        self, call: Callable[..., Any], values: dict[str, Any], track: _Track, facts: dict[str, Any]
    ) -> dict[str, Any] | None:
        links = values["nvlink_links"]
        if not links:
            return None
        totals = tuple(values[f"nvlink_{n}"] for n in NVLINK_COUNTERS)
        if totals != track.link_totals:  # read per link only when a total moved
            track.link_errors = {
                link: {
                    name: call("nvmlDeviceGetNvLinkErrorCounter", link, counter)
                    for name, counter in NVLINK_COUNTERS.items()
                }
                for link in range(links)
            }
            track.link_totals = totals
        entries, inactive = [], []
        for link, state in zip(range(links), values["link_states"] or [None] * links, strict=False):
            if state is None:  # a driver without the per-link state field
                state = call("nvmlDeviceGetNvLinkState", link)
            active = state in LINK_UP if state is not None else None
            if active:
                track.links_up.add(link)
            elif active is False:
                inactive.append(link)
            entries.append({"link": link, "active": active, "errors": track.link_errors.get(link)})
        # down: seen up before (this run or, from the evidence file, an earlier one), or down
        # while the GPU's other links are up (a GPU with no link up has no NVLink peers)
        partly_up = len(inactive) < links
        facts["nvlink_down"] = [link for link in inactive if link in track.links_up or partly_up]
        return {"links": entries, "errors": dict(zip(NVLINK_COUNTERS, totals, strict=True))}

    def _fabric(self, nvml: Any, call: Callable[..., Any]) -> dict[str, Any] | None:
        struct = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
        if struct is None:
            return None
        info = struct()
        if call("nvmlDeviceGetGpuFabricInfo", ctypes.byref(info)) is None:
            return None
        state = FABRIC_STATES.get(info.state, f"state {info.state}")
        if state is None:
            return None  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: no NVSwitch fabric
        status = None
        if state == "completed" and info.status != 0:
            status = str(nvml.NVMLError(info.status))
        cluster = bytes(info.clusterUuid).hex()
        return {
            "state": state,
            "status": status,
            "clique_id": info.cliqueId,
            "cluster_uuid": cluster if cluster.strip("0") else None,  # all zero: no cluster named
        }

    def _clock_events(self, mask: int | None, track: _Track, now: float) -> dict[str, float]:
        """Each active clock event and for how long it has been active (seconds)."""
        active = {name for bit, name in CLOCK_EVENTS.items() if mask and mask & bit}
        track.clock_since = {name: track.clock_since.get(name, now) for name in active}
        return {name: round(now - since, 1) for name, since in sorted(track.clock_since.items())}

    def _recent(self, uuid: str | None, xids: list[dict[str, Any]], now: float) -> list[int]:
        """The Xid codes whose hold has not ended (gpu/holds.py)."""
        return [x["code"] for x in xids if x["event"] == "xid" and self.holds.holds(uuid, x, now)]

    def _rising(self, track: _Track, name: str, values: dict[str, Any], now: float) -> bool:
        value = values.get(name)
        if value is None:
            return False
        before = track.counters.get(name)
        track.counters[name] = value
        if before is not None and value > before:
            track.rose_at[name] = now
        rose = track.rose_at.get(name)
        return rose is not None and now - rose <= self.rising_s

    def _pcie_rate(self, track: _Track, replays: int | None, now: float) -> bool:
        """More than PCIE_REPLAYS_PER_MINUTE replays within a minute (against the newest read at
        least a minute old, else the oldest), seen within GPU_RISING_SEC."""
        if replays is None:
            return False
        samples = track.pcie_samples
        if samples and replays < samples[-1][1]:
            samples.clear()  # the count went back (a reset): a new series
        base = next((count for at, count in reversed(samples) if now - at >= PCIE_WINDOW_S), None)
        if base is None and samples:
            base = samples[0][1]
        while len(samples) > 1 and now - samples[1][0] >= PCIE_WINDOW_S:
            samples.popleft()  # keep one read at least a window old
        samples.append((now, replays))
        track.counters["pcie_replay"] = replays
        if base is not None and replays - base > gpu_rules.PCIE_REPLAYS_PER_MINUTE:
            track.rose_at["pcie_replay"] = now
        rose = track.rose_at.get("pcie_replay")
        return rose is not None and now - rose <= self.rising_s

    def fabric_gpus(self, devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The GPUs on the NVSwitch fabric: those NVML reports fabric state for, else (a board
        older than Hopper, where NVML has none) every GPU: NVSwitches tie all of a board's GPUs."""
        with_fabric = [d for d in devices if (d.get("health") or {}).get("fabric")]
        return with_fabric or [d for d in devices if d.get("health")]

    def add_switch_faults(self, device: dict[str, Any], switches: list[dict[str, Any]]) -> None:
        """Judges a GPU on the fabric again with the fatal SXids whose hold has not ended for it."""
        uuid = device.get("uuid")
        track = self._tracks.get(uuid or "")
        health = device.get("health")
        if track is None or not health:
            return
        now = self.clock()
        faults = [
            f"NVSwitch {switch['pci_bus_id']}: SXid {entry['code']} (fatal): fabric reset needed"
            for switch in switches
            for entry in switch["sxid"]
            if entry["event"] == "sxid_fatal" and self.holds.holds(uuid, entry, now)
        ]
        if not faults and not track.facts.get("sxid_fatal"):
            return
        track.facts = {**track.facts, "sxid_fatal": faults}
        health["verdict"], health["reasons"] = gpu_rules.verdict(track.facts)

    # --- checks (gpu.check, the check after gpu.reset)

    def note_check(self, uuid: str, check: dict[str, Any]) -> None:
        """The GPU's last check (checks.py's form); its facts count from the next read."""
        self.checks[uuid] = check
        track = self._tracks.get(uuid)
        if track is not None and track.facts:
            track.facts = {**track.facts, **self.check_facts(uuid)}

    def check_facts(self, uuid: str) -> dict[str, list[str]]:
        """check_failed / check_warned: the failed and warned tests of the GPU's last DCGM
        diagnostic, while it counts: run on an idle GPU, in this boot, no reset seen after it."""
        check = self.checks.get(uuid)
        if not check or check.get("tool") != "dcgm" or not check.get("counted"):
            return {"check_failed": [], "check_warned": []}
        reset = self.holds.last_reset(uuid)
        if (reset and reset["at"] >= check["at"]) or self.holds.rebooted_since(check):
            return {"check_failed": [], "check_warned": []}
        said = f"DCGM diagnostic level {check['level']}"
        return {
            "check_failed": [f"{said} failed: {t}" for t in check.get("failed") or ()],
            "check_warned": [f"{said} warned: {t}" for t in check.get("warned") or ()],
        }

    # --- what an earlier run saw (gpu/evidence.py)

    def baselines(self) -> dict[str, dict[str, Any]]:
        return {
            uuid: {
                "counters": dict(t.counters),
                "rose_at": dict(t.rose_at),
                "links_up": sorted(t.links_up),
                "reset_view": dict(t.view),
                "last_reset": self.holds.last_reset(uuid),
                "last_check": self.checks.get(uuid),
            }
            for uuid, t in list(self._tracks.items())  # also read by the door's thread: a copy first
        }

    def restore(self, uuid: str, saved: dict[str, Any]) -> None:
        """An earlier run's baselines (node/gpu_faults.py has checked their fields)."""
        track = self._tracks.setdefault(uuid, _Track())
        track.counters = dict(saved.get("counters") or {})
        track.rose_at = dict(saved.get("rose_at") or {})
        track.links_up = set(saved.get("links_up") or ())
        track.view = dict(saved.get("reset_view") or {})
        self.holds.restore(uuid, saved.get("last_reset"))
        if isinstance(saved.get("last_check"), dict):
            self.checks[uuid] = dict(saved["last_check"])

    def forget(self, uuid: str) -> None:
        self._tracks.pop(uuid, None)
        self.checks.pop(uuid, None)
        self.holds.forget(uuid)
        self.xids.forget(uuid)

    # --- a GPU NVML fails on, or no longer counts

    def failed(self, uuid: str | None, exc: Any, every_call: bool = False) -> dict[str, Any]:
        """A GPU whose read raised `exc`: lost (NVML says so), unanswering (`every_call` failed) or
        one NVML error; the first two end when it answers again, a reset's sign (gpu/holds.py)."""
        lost = getattr(exc, "value", None) in LOST_CODES
        now = self.clock()
        xids = self.xids.of(uuid)
        facts = {
            "lost": str(exc) if lost else None,
            "unanswering": str(exc) if every_call and not lost else None,
            "nvml_errors": [] if lost or every_call else [str(exc)],
            "recent_xids": self._recent(uuid, xids, now),
        }
        if uuid and (lost or every_call):
            self._seen(uuid, self._tracks.setdefault(uuid, _Track()), {"failing": str(exc)}, now)
        verdict, reasons = gpu_rules.verdict(facts)
        return {"verdict": verdict, "reasons": reasons, "xid": xids}

    def missing(self, uuid: str, since: str) -> dict[str, Any]:
        self._seen(uuid, self._tracks.setdefault(uuid, _Track()), {"failing": f"missing since {since}"}, self.clock())
        verdict, reasons = gpu_rules.verdict({"missing": since})
        return {"verdict": verdict, "reasons": reasons, "xid": self.xids.of(uuid)}

    def stale(self, uuid: str | None, health: dict[str, Any] | None, hung: str | None) -> dict[str, Any]:
        """The verdict of a GPU whose read did not come back: the facts of its last good read,
        with the Xids logged since and, on the GPU whose call hangs, `hung` (its function)."""
        track = self._tracks.get(uuid or "")
        facts = dict(track.facts) if track else {}
        facts["recent_xids"] = self._recent(uuid, self.xids.of(uuid), self.clock())
        facts["hung"] = hung
        verdict, reasons = gpu_rules.verdict(facts)
        return {**(health or {}), "verdict": verdict, "reasons": reasons, "xid": self.xids.of(uuid)}


def node_health(
    devices: list[dict[str, Any]],
    missing: list[dict[str, Any]],
    problem: str | None,
    notes: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """The node's verdict: its worst GPU's, with each GPU's reasons named by index; `problem`
    (NVML unusable on a machine with an NVIDIA library and driver problem) fails it; `notes`
    are the node's own (verdict, reason) pairs (the watch, the fabric manager, unplaced Xids)."""
    verdicts, reasons = [], []
    for device in [*devices, *missing]:
        health = device.get("health") or {}
        verdicts.append(health.get("verdict", gpu_rules.OK))
        reasons += [f"GPU {device['index']}: {reason}" for reason in health.get("reasons", ())]
    if problem:
        verdicts.append(gpu_rules.FAILED)
        reasons.append(problem)
    for verdict, reason in notes or ():
        verdicts.append(verdict)
        reasons.append(reason)
    return {"verdict": gpu_rules.worst(verdicts), "reasons": reasons}


def _link_states(links: int) -> list[tuple[int, int]]:
    return [(NVLINK_STATE_FIELD, link) for link in range(links)]


def _field_number(answer: Any) -> int | None:
    kind = answer.valueType
    value = answer.value
    return {1: value.uiVal, 2: value.ulVal, 3: value.ullVal, 4: value.sllVal, 5: value.siVal, 6: value.usVal}.get(kind)


def _remapped_rows(remap: tuple[int, int, int, int] | None) -> dict[str, Any] | None:
    if remap is None:
        return None
    correctable, uncorrectable, pending, failure = remap
    return {
        "correctable": correctable,
        "uncorrectable": uncorrectable,
        "pending": bool(pending),
        "failure": bool(failure),
    }


def _bool(value: int | None) -> bool | None:
    return bool(value) if value is not None else None


def _some(values: dict[str, Any]) -> dict[str, Any] | None:
    """None when the GPU answered none of them (not supported)."""
    return values if any(v is not None for v in values.values()) else None


def _ordered(health: dict[str, Any]) -> dict[str, Any]:
    """verdict and reasons first: what a reader looks at."""
    return {"verdict": health.pop("verdict"), "reasons": health.pop("reasons"), **health}
