"""The executor worker's loop."""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from typing import TYPE_CHECKING, Any

import orjson
import zmq

from faden_agent import protocol
from faden_agent.backend.producer import Reports
from faden_agent.common import testhooks
from faden_agent.disk.diskfull import DiskFull
from faden_agent.disk.files import quarantine_record_id
from faden_agent.ipc import Channel, Message
from faden_agent.workers.base import Worker
from faden_agent.workers.executor.adoption import adopt
from faden_agent.workers.executor.capture_request import ask_capture
from faden_agent.workers.executor.commands import KINDS, Commands
from faden_agent.workers.executor.death_cause import known_gpus
from faden_agent.workers.executor.docker_ops import DockerOps
from faden_agent.workers.executor.events import EventWatcher
from faden_agent.workers.executor.host_policy import PolicyDenied, policy_or_refusal
from faden_agent.workers.executor.journal import QUEUED, RUNNING, Entry, Journal
from faden_agent.workers.executor.scheduler import Job
from faden_agent.workers.executor.specs import SpecError
from faden_agent.workers.executor.timeline import Timeline

if TYPE_CHECKING:
    from faden_agent.protocol.status import CommandAck, ExecutorStatus

log = logging.getLogger(__name__)

ENGINE_PROBE_S = 5.0
EXPIRY_INTERVAL_S = 3600.0
POISON_DEATHS = 2  # a command running at this many executor deaths in a row is not run again


class ExecutorWorker(Worker):
    name = "executor"

    @property
    def tick_interval_s(self) -> float:  # type: ignore[override]  # read like the base's class attribute
        """Deadline checks four times a second while commands run; idle, with the loop's
        "alive" message (every WORKER_LIVENESS_SEC, 3 s; at least a second), so an idle
        executor wakes no more often than it says it is alive."""
        return 0.25 if self.scheduler.jobs() else max(1.0, self.config.worker_liveness_sec)

    def setup(self) -> None:
        self.journal = Journal(self.config.state_dir)
        self.reports = Reports(self.config)
        self.timeline = Timeline(self.reports, self.journal)
        if self.journal.quarantined:
            log.error("%s", self.journal.quarantined["message"])
            self.reports.put(
                protocol.EVENT, self.journal.quarantined, record_id=quarantine_record_id(self.journal.quarantined)
            )
        self.policy = policy_or_refusal(self.config)
        if self.policy.broken:
            log.error("host policy: %s; every container.run is refused until it is fixed", self.policy.broken)
        self.ops = DockerOps(self.config)
        self.frame = Commands(self.config, self.ops, self.journal, self.timeline, self.policy)
        self.scheduler = self.frame.scheduler
        self.engine_ok: bool | None = None
        self.starting = True  # until the engine's first answer
        self.events = EventWatcher(
            self.ops,
            self.reports,
            lambda cid: cid in self.journal.adopted_ids(),
            self.stop_event,
            lambda: known_gpus(self.config.runtime_dir, self.config.state_dir),
            self.config.workload_fault_window_sec,
            functools.partial(ask_capture, self.config.runtime_dir) if self.config.stall_capture else None,
        )
        self.events.start(self.start_thread)
        self.start_thread("adoption", adopt, self.ops, self.journal, self.reports, self.stop_event, finite=True)
        self.start_thread("engine-probe", self._probe_engine)
        replayed = self.timeline.report_unreported()  # finished by a predecessor, never reported
        if replayed:
            log.warning(
                "re-emitted the terminal records of %d finished command(s) a predecessor never reported", replayed
            )
        self.next_expiry = 0.0
        self.expire_journal()
        self.resume_unfinished()
        self.requests = Channel.bind(zmq.REP, self.endpoints.executor)

    def channels(self) -> list[Channel]:
        return [self.requests]

    def handle(self, channel: Channel, message: Message) -> None:
        # A REP socket must answer every request, or it takes no other: never raise before send.
        if message.type == "adopt":  # the node enrolled again: report the managed containers to it
            self.start_thread("adoption", adopt, self.ops, self.journal, self.reports, self.stop_event, finite=True)
            channel.send("ack", {"adopt": True})
            return
        if message.type != "command":
            channel.send(
                "error",
                {"message": f"unknown request type {protocol.quote(message.type)}; expected 'command' or 'adopt'"},
            )
            return
        try:
            reply = self.accept(message.body)
        except DiskFull as exc:
            # Not an ack: the downlink keeps the command and hands it over again (the
            # journal knows it when it got that far, see accept's duplicate branch).
            channel.send("error", {"message": f"the executor cannot journal the command now: {exc}", "retry": True})
            return
        except Exception as exc:  # a bug with one command must not wedge the socket
            log.exception("accepting a command failed")
            body = message.body if isinstance(message.body, dict) else {}
            reply = {
                "id": body.get("id"),
                "accepted": False,
                "duplicate": False,
                "reason": "internal_error",
                "message": f"the executor failed to accept the command: {protocol.quote(str(exc))}",
            }
        channel.send("ack", reply)

    def tick(self) -> None:
        if self.timeline.unreported:
            self.timeline.report_unreported()
        self.enforce_deadlines()
        if time.monotonic() >= self.next_expiry:
            self.expire_journal()

    def expire_journal(self) -> None:
        """Done commands past the retention bound leave the journal (hourly)."""
        self.next_expiry = time.monotonic() + EXPIRY_INTERVAL_S
        try:
            deleted, hashed = self.journal.expire(self.config.command_retention_days * 86400)
        except DiskFull:
            return  # the next round tries again
        except sqlite3.Error as exc:  # retention must never stop the executor
            log.error("journal retention failed: %s", exc)
            return
        if deleted or hashed:
            log.info(
                "journal: %d done command(s) past retention deleted, %d spec(s) reduced to a hash", deleted, hashed
            )

    def status(self) -> ExecutorStatus:
        engine = {None: "unknown", True: "ok", False: "unreachable"}[self.engine_ok]
        timeline = self.timeline
        return {
            **self.scheduler.counts(),
            "docker": engine,
            "events": self.events.connected,
            "commands": {
                "received": timeline.received_counts,
                "ended": timeline.ended_counts,
                "peer_bytes_fetched": self.frame.peer_bytes_fetched,
            },
        }

    def teardown(self) -> None:
        # Running commands stay "running" in the journal; the next start resumes them (and,
        # since this stop is in order, does not count it as a death they caused).
        self.journal.mark_clean_stop()
        self.events.stop()
        self.requests.close()
        self.reports.close()

    # --- inputs

    def accept(self, body: Any) -> CommandAck:
        """Journal the command, then own it: ack accepted unless it cannot be journaled."""
        problem = protocol.command_problem(body)
        if problem is not None:  # the downlink hands over none of these; a direct sender might
            command_id = body.get("id") if isinstance(body, dict) else None
            return {
                "id": command_id if protocol.usable_id(command_id) else None,
                "accepted": False,
                "duplicate": False,
                "reason": "invalid_spec",
                "message": f"the command is malformed: {problem}",
            }
        command_id, seq, kind = body["id"], body["seq"], body["kind"]
        deadline = None if body.get("deadline") is None else float(body["deadline"])
        spec = body.get("spec")
        # The stream worker measured it and left the spec out, or we measure.
        size = body["too_large"] if "too_large" in body else len(orjson.dumps(spec))
        too_large = "too_large" in body or size > protocol.MAX_SPEC_BYTES
        try:
            ran_before = self.journal.expired(command_id)  # asked first: add() makes it a row again
            entry, duplicate = self.journal.add(
                command_id, seq, kind[: protocol.MAX_ID_BYTES], None if too_large else spec, deadline
            )
        except sqlite3.Error as exc:
            log.error("cannot journal command %s: %s", command_id, exc)
            return {
                "id": command_id,
                "accepted": False,
                "duplicate": False,
                "reason": "journal_error",
                "message": f"the executor cannot journal the command: {exc}",
            }
        if duplicate:
            if entry.outcome is not None:
                self.timeline.replay(entry)
            elif entry.state == QUEUED and self.scheduler.find(command_id) is None:
                # Journaled by an earlier hand-off that failed before dispatch (a full disk).
                self.timeline.received(command_id, entry.kind, seq)
                self.dispatch(entry)
            return {"id": command_id, "accepted": True, "duplicate": True}
        testhooks.kill_between("journal", "received")
        self.timeline.received(command_id, entry.kind, seq)
        if ran_before:
            self.timeline.finish(
                command_id,
                protocol.REJECTED,
                "already_ran",
                f"{protocol.quote(kind)}: this command ran more than {self.config.command_retention_days:g} days ago"
                " (FADEN_NODE_AGENT_COMMAND_RETENTION_DAYS: its outcome is no longer kept); it is not run again",
            )
        elif too_large:
            self.timeline.finish(
                command_id,
                protocol.REJECTED,
                "too_large",
                f"{protocol.quote(kind)}: the command ({protocol.quote(size)} bytes) exceeds the "
                f"size limit ({protocol.MAX_SPEC_BYTES} bytes of spec); it is not run",
            )
        else:
            self.dispatch(entry)
        return {"id": command_id, "accepted": True, "duplicate": False}

    def dispatch(self, entry: Entry, stop_reason: str | None = None) -> None:
        """Validate and schedule a journaled command (new, or left unfinished by a predecessor);
        whatever goes wrong ends this command with a reason, never the worker."""
        step = "validating"
        try:
            definition = KINDS.get(entry.kind)
            if definition is None:
                self.timeline.finish(
                    entry.id,
                    protocol.REJECTED,
                    "unknown_kind",
                    f"unknown command kind {protocol.quote(entry.kind)}; this agent knows {', '.join(KINDS)}",
                )
                return
            try:
                spec = definition.validate(entry.spec)
            except SpecError as exc:
                self.timeline.finish(entry.id, protocol.REJECTED, "invalid_spec", f"{entry.kind}: {exc}")
                return
            if definition.host_policy:
                try:
                    self.policy.admit(spec)
                except PolicyDenied as exc:
                    self.timeline.finish(entry.id, protocol.REJECTED, exc.reason, f"{entry.kind}: {exc}")
                    return
            step = "scheduling"
            job = Job(
                id=entry.id,
                kind=entry.kind,
                spec=spec,
                definition=definition,
                deadline=definition.deadline(spec, entry.deadline, entry.received_at),
                key=definition.queue_key(spec) if definition.queue_key else "inline",
                attempt=entry.attempt,
                stop_reason=stop_reason,
            )
            if definition.inline:
                self.frame.execute(job)  # touches no Docker: inline keeps it ahead of every queue
            else:
                self.scheduler.submit(job)
        except Exception as exc:  # a poison command ends as a command
            log.exception("command %s (%s) failed while %s", entry.id, entry.kind, step)
            state = protocol.REJECTED if step == "validating" else protocol.FAILED
            self.timeline.finish(
                entry.id,
                state,
                "internal_error",
                f"{protocol.quote(entry.kind)}: unexpected error while {step} it: "
                f"{type(exc).__name__}: {protocol.quote(str(exc))}",
            )

    def resume_unfinished(self) -> None:
        """Commands a killed predecessor accepted: finish them, or report them interrupted;
        one that was running each of the last POISON_DEATHS times the executor died is
        failed as `poison` instead of being run again."""
        deaths = self.journal.count_deaths()
        for entry in self.journal.unfinished():
            if self.scheduler.find(entry.id):
                continue
            if entry.state == RUNNING and deaths.get(entry.id, 0) >= POISON_DEATHS:
                log.error(
                    "command %s (%s) was running each of the last %d times the executor died: failing it as poison",
                    entry.id,
                    entry.kind,
                    deaths[entry.id],
                )
                self.timeline.finish(
                    entry.id,
                    protocol.FAILED,
                    "poison",
                    f"{protocol.quote(entry.kind)}: the executor died {deaths[entry.id]} times in a row "
                    f"while this command ran (attempt {entry.attempt}); not run again",
                )
                continue
            late = self._deadline(entry) <= time.time()
            if entry.state != QUEUED and late:
                self.dispatch(entry, stop_reason="interrupted")  # reported (and cleaned up) on a thread
                continue
            if entry.state == QUEUED:  # a kill may have come between the journal and this record
                self.timeline.received(entry.id, entry.kind, entry.seq)  # same id: once at the backend
            else:
                log.info("resuming command %s (%s) interrupted by an executor restart", entry.id, entry.kind)
                self.timeline.progress(
                    entry.id,
                    entry.attempt,
                    0,
                    phase="resumed",
                    message="the executor restarted while this command ran; resuming it",
                )
            self.dispatch(entry)

    # --- deadlines

    @staticmethod
    def _deadline(entry: Entry) -> float:
        """The command's deadline; +inf for one that will be rejected anyway (dispatch says why)."""
        definition = KINDS.get(entry.kind)
        if definition is None:
            return float("inf")
        try:
            return definition.deadline(definition.validate(entry.spec), entry.deadline, entry.received_at)
        except Exception:  # noqa: BLE001 - unknown kind, bad spec, a validator bug: dispatch reports it
            return float("inf")

    def enforce_deadlines(self) -> None:
        now = time.time()
        for job in self.scheduler.jobs():
            if job.stop_reason is None and job.deadline <= now:
                job.stop("timeout")
                self.timeline.finish(
                    job.id,
                    protocol.FAILED,
                    "timeout",
                    f"{job.kind} did not finish before its deadline"
                    + (" (the Docker engine is not answering)" if self.engine_ok is False else ""),
                )

    def _probe_engine(self) -> None:
        while not self.stop_event.is_set():
            ok = self.ops.ping()
            if ok != self.engine_ok:
                if ok:
                    log.info("the Docker engine answers")
                else:
                    log.warning("the Docker engine does not answer; commands fail until it is back")
                self.engine_ok = ok
            if self.starting:  # the engine's first answer (or its silence) is in the status now
                self.starting = False
                self.alive_now()
            self.stop_event.wait(ENGINE_PROBE_S)
