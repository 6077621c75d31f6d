"""What happened in a run, read from its directory: each rank's attempts as spans, and the metrics its logs print.

Metrics come from each rank's output logs, in these forms:

- the seeds' (MindSpore ``LossMonitor``, ``examples/train_cifar.py``):
  ``epoch: 2 step: 40, loss is 1.234``; the step counts within its epoch, so the
  x value is ``(epoch - 1) * S + step`` where S is the largest step the log shows
  for any epoch (the steps per epoch when the last step of an epoch is logged);
- accuracy lines (``accuracy is 0.91``, ``acc: 0.91``, ``epoch: 2 accuracy: 0.83``,
  MindSpore's ``Model.eval`` result ``{'accuracy': 0.91}``): at the end of the
  epoch they name, else at the loss line before them, else numbered 1, 2, ...;
- the frameworks' own lines (``FRAMEWORKS``): nanoGPT's ``iter 30: loss 2.5375, time 98.12ms, mfu 1.23%``
  (loss at iteration 30) and ``step 250: train loss 1.90, val loss 2.01`` (``val loss``); HF Trainer's logged
  dicts ``{'loss': 0.52, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.33}`` (every number but
  ``epoch``, ``step``, ``total_flos``, ``*_runtime`` and ``*_per_second``; the x value is the dict's ``step``
  where it names one, else the count of the training bar drawn before it); Lightning's bar postfix
  ``Epoch 1:  45%|...| 45/100 [00:12<00:15,  3.61it/s, v_num=0, loss=0.5]`` (``loss``/``train_loss``, at
  epoch x total + count); Megatron's ``iteration 10/ 1000 | ... | lm loss: 1.234E+00 |`` and MindFormers'
  ``{ Epoch:[  1/  2], step:[    2/   19], loss: 10.633, ...`` (at (epoch - 1) x 19 + 2). A line redrawn after
  carriage returns (a progress bar) is read segment by segment;
- one JSON object per line, tagged ``"dlaunch": "metric"``:
  ``{"dlaunch": "metric", "step": 120, "loss": 0.52, "lr": 0.1}``; ``step`` is the
  x value as given, every other number (but ``epoch`` and ``time``) is a metric
  of that name.

A log is read in bounded chunks and its points are sampled (``Sample``): a 2 GiB log of loss lines
costs the report the same memory as a short one, and every line is still counted.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.base.border import Refused, ascii_int, cut_line, parse_json
from launcher.base.lines import bounded_lines
from launcher.rundir.paths import attempt_file
from launcher.rundir.read import RankRef, Run, log_attempts, log_path

# No two runs of \s* meet without a required character between them: every pattern here matches in time
# linear in the line (adjacent \s* runs backtrack quadratically on long runs of spaces), and lines are read at
# most MAX_LINE long.
SEEDS_LOSS = re.compile(r"epoch:\s*(\d+)\s*(?:,\s*)?step:\s*(\d+)\s*(?:,\s*)?loss is\b(.*)")
NUMBER_TEXT = r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?<!\w)[-+]?(?:nan|inf)\b"
NUMBER = re.compile(NUMBER_TEXT, re.IGNORECASE)  # the first number that is not part of a name (Float32)
# "accuracy is 0.91", "acc: 0.91", "epoch: 2 accuracy: 0.83", MindSpore's Model.eval dict {'accuracy': 0.91}
ACCURACY = re.compile(r"(?<![\w-])['\"]?(?:acc|accuracy)['\"]?\s*(?:\bis\b|[:=])\s*(?:[\[(]\s*)?(" + NUMBER_TEXT + ")",
                      re.IGNORECASE)
EPOCH = re.compile(r"\bepoch\s*(?:[:=]\s*)?(\d+)\b", re.IGNORECASE)
NANOGPT_LOSS = re.compile(r"\biter (\d+): loss (" + NUMBER_TEXT + ")", re.IGNORECASE)
NANOGPT_EVAL = re.compile(r"\bstep (\d+): train loss (?:" + NUMBER_TEXT + r"), val loss (" + NUMBER_TEXT + ")",
                          re.IGNORECASE)
HF_PAIR = re.compile(r"'([A-Za-z_][\w/.-]{0,60})': '?(" + NUMBER_TEXT + ")'?", re.IGNORECASE)
HF_SKIP = re.compile(r"^(?:epoch|step|total_flos)$|_runtime$|_per_second$")
LIGHTNING_LOSS = re.compile(r"^\s*Epoch (\d+):[^|]{0,40}\|[^|]{0,400}\|\s*(\d+)/(\d+) \[[^\]]{0,400}?[ ,]"
                            r"(?:train_)?loss(?:_step)?=(" + NUMBER_TEXT + ")", re.IGNORECASE)
BAR_COUNT = re.compile(r"^\s*(?:\d+%)?\|[^|]{0,400}\|\s*(\d+)/\d+ \[")   # HF's training bar (no description)
MEGATRON_LOSS = re.compile(r"\biteration\s+(\d+)\s*/.*?\| lm loss: (" + NUMBER_TEXT + ")", re.IGNORECASE)
MINDFORMERS_LOSS = re.compile(r"\bstep:\s*\[\s*(\d+)\s*/\s*(\d+)\s*\], loss:\s*(" + NUMBER_TEXT + ")",
                              re.IGNORECASE)
MINDFORMERS_EPOCH = re.compile(r"\bEpoch:\s*\[\s*(\d+)\s*/")
MAX_LINE = 64 << 10            # longer lines are no metric lines: skipped, never held whole
MAX_KEPT = 20000               # points kept per metric and log (charts draw 1000): a 2 GiB log is evenly sampled
MAX_NAMES = 64                 # JSON metric names kept per log; later new names are ignored
METRIC_TAG = "metric"          # {"dlaunch": "metric", ...}
NOT_METRICS = {"dlaunch", "step", "epoch", "time", "rank"}


@dataclass
class Span:
    """One attempt of one rank on the timeline."""

    attempt: int
    start: float | None
    end: float | None
    outcome: str                    # a key of charts.OUTCOME_COLOURS
    label: str                      # "exited 3", "SIGTERM", "hung", "running"
    detail: str = ""


@dataclass
class RankStory:
    ref: RankRef
    spans: list[Span] = field(default_factory=list)
    metrics: dict[str, dict[int, list[tuple[float, float]]]] = field(default_factory=dict)  # name -> attempt -> pts


class Sample(list):
    """Items added one by one, at most MAX_KEPT of them held: every ``stride``-th (the stride doubles each
    time the list fills), and the last one once ``finish`` is called; ``seen`` counts every item added.
    Memory stays bounded however many metric lines a log holds, and the points stay evenly spread."""

    def __init__(self) -> None:
        super().__init__()
        self.seen, self.stride, self.last = 0, 1, None

    def add(self, item) -> None:
        if self.seen % self.stride == 0:
            self.append(item)
            if len(self) > MAX_KEPT:
                del self[1::2]
                self.stride *= 2
        self.seen += 1
        self.last = item

    def finish(self) -> Sample:
        if self.seen and (self.seen - 1) % self.stride:
            self.append(self.last)
        return self


class Points(Sample):
    """[(x, value)] of one metric in one log; ``axis`` says what x is: "step", or "evaluation" (the
    evaluation's number) for accuracy lines in a log that shows no step at all."""

    axis = "step"


class Frameworks:
    """The frameworks' own metric lines of one log, in order (nanoGPT, HF Trainer, Lightning, Megatron,
    MindFormers): ``read`` adds their points to ``found`` and says whether the line was one of them."""

    def __init__(self, found: dict[str, Points]):
        self.found = found
        self.bar: int | None = None        # the count of HF's training bar last drawn
        self.logged = 0                    # HF dicts read (their x where neither a step nor a bar says one)
        self.lightning: int | None = None  # the x of Lightning's last loss point (a redraw of the same step adds none)

    def _add(self, name: str, x: float, text: str) -> None:
        points = self.found.get(name)
        if points is None and len(self.found) >= MAX_NAMES:
            return
        self.found.setdefault(name, Points()).add((x, float(text)))

    def read(self, segment: str) -> bool:
        line = cut_line(segment.strip())
        if "|" in line and "/" in line:
            if "Epoch " in line and "loss" in line:
                match = LIGHTNING_LOSS.match(line)
                epoch, count, total = (ascii_int(match.group(n)) for n in (1, 2, 3)) if match else (None,) * 3
                if match and epoch is not None and count is not None and total is not None:
                    x = epoch * total + count
                    if x != self.lightning:
                        self.lightning = x
                        self._add("loss", x, match.group(4))
                    return True
            match = BAR_COUNT.match(line)
            if match:
                self.bar = ascii_int(match.group(1))
                return True
            if "lm loss:" in line:
                match = MEGATRON_LOSS.search(line)
                step = ascii_int(match.group(1)) if match else None
                if match and step is not None:
                    self._add("loss", step, match.group(2))
                    return True
        if line.startswith("{'") and ("'loss': " in line or "'eval_loss': " in line):
            pairs = {name: value for name, value in HF_PAIR.findall(line)}
            self.logged += 1
            step = ascii_int(pairs.get("step"))
            x = step if step is not None else self.bar if self.bar is not None else self.logged
            for name, value in pairs.items():
                if not HF_SKIP.search(name):
                    self._add(name, x, value)
            return True
        if "iter " in line and ": loss " in line:
            match = NANOGPT_LOSS.search(line)
            step = ascii_int(match.group(1)) if match else None
            if match and step is not None:
                self._add("loss", step, match.group(2))
                return True
        if "val loss " in line:
            match = NANOGPT_EVAL.search(line)
            step = ascii_int(match.group(1)) if match else None
            if match and step is not None:
                self._add("val loss", step, match.group(2))
                return True
        if "step:[" in line and "loss:" in line:
            match = MINDFORMERS_LOSS.search(line)
            step, total = (ascii_int(match.group(1)), ascii_int(match.group(2))) if match else (None, None)
            if match and step is not None and total is not None:
                epoch_match = MINDFORMERS_EPOCH.search(line)
                epoch = ascii_int(epoch_match.group(1)) if epoch_match else None
                self._add("loss", (max(epoch, 1) - 1) * total + step if epoch is not None else step, match.group(3))
                return True
        return False


def parse_metrics(lines) -> dict[str, Points]:
    """Metric name -> [(step, value)] from a log's lines: the seeds' loss lines, accuracy lines, JSON lines.

    An accuracy line's step: the end of its epoch where it names one ("epoch: 2 accuracy: 0.83"), else the
    step of the loss line before it, else (no loss line yet) the evaluation's number.
    """
    seeds = Sample()      # (epoch, step, value)
    accuracy = Sample()   # (its epoch, the (epoch, step) of the seeds' line before it, value)
    found: dict[str, Points] = {}
    json_step = None
    per_epoch = 0
    last_seeds: tuple[int, int] | None = None
    frameworks = Frameworks(found)
    for line in lines:
        if "\r" in line:   # a progress bar redrawn: every drawing, then the last one's text as a line
            segments = [segment for segment in line.split("\r") if segment.strip()]
            for segment in segments[:-1]:
                frameworks.read(segment)
            line = segments[-1] if segments else ""
        if frameworks.read(line):
            continue
        text = line.strip()
        if text.startswith("{") and '"dlaunch"' in text:
            try:
                record = parse_json(text, "a metric line")
            except Refused:   # not JSON after all, or past the border's bounds
                record = None
            step = record.get("step") if isinstance(record, dict) else None
            if isinstance(record, dict) and record.get("dlaunch") == METRIC_TAG and step is not None \
                    and _is_number(step):
                json_step = float(step)
                for name, value in record.items():
                    if name not in NOT_METRICS and _is_number(value) and (str(name) in found
                                                                          or len(found) < MAX_NAMES):
                        found.setdefault(str(name), Points()).add((float(step), float(value)))
                continue
        match = SEEDS_LOSS.search(text)
        if match:
            number = NUMBER.search(match.group(3))
            epoch, step = ascii_int(match.group(1)), ascii_int(match.group(2))
            if number and epoch is not None and step is not None:
                last_seeds = (epoch, step)
                per_epoch = max(per_epoch, last_seeds[1])
                seeds.add((*last_seeds, float(number.group(0))))
            continue
        acc = ACCURACY.search(text)
        if acc:
            named = EPOCH.search(text[:acc.start()])
            if not seeds.seen and json_step is not None and not named:
                found.setdefault("accuracy", Points()).add((json_step, float(acc.group(1))))
            else:
                accuracy.add((ascii_int(named.group(1)) if named else None, last_seeds, float(acc.group(1)),
                              accuracy.seen + 1))
    unseen: dict[str, int] = {}
    if seeds.seen:
        loss = found.setdefault("loss", Points())
        for epoch, step, value in seeds.finish():
            loss.add(((epoch - 1) * per_epoch + step, value))
        unseen["loss"] = seeds.seen - len(seeds)   # lines sampled away before they became points
    if accuracy.seen:
        points = found.setdefault("accuracy", Points())
        for its_epoch, before, value, evaluation in accuracy.finish():
            if its_epoch is not None and per_epoch:
                x = its_epoch * per_epoch
            elif before is not None:
                last_epoch, last_step = before
                x = (last_epoch - 1) * per_epoch + last_step
            else:
                x = its_epoch if its_epoch is not None else evaluation
                if not seeds.seen:
                    points.axis = "epoch" if its_epoch is not None else "evaluation"
            points.add((x, value))
        unseen["accuracy"] = accuracy.seen - len(accuracy)
    for name, points in found.items():
        points.finish().seen += unseen.get(name, 0)
    return found


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _read_lines(path: str):
    return bounded_lines(path, MAX_LINE)


def span_outcome(entry: Mapping[str, Any], cause: Mapping[str, Any] | None, rank: int | None) -> tuple[str, str, str]:
    """(outcome, short label, detail) of one rank in one attempt's summary."""
    cause = cause or {}
    is_root = bool(cause) and cause.get("rank") == rank
    if entry.get("hung") or (is_root and cause.get("hung")):
        return ("root" if is_root else "failed"), "hung", entry.get("reason") or cause.get("reason") or "no progress"
    if entry.get("spawn_error"):
        return ("root" if is_root else "failed"), "failed to start", entry["spawn_error"]
    if entry.get("signal"):
        outcome = "root" if is_root else ("stopped" if cause or entry["signal"] in ("SIGTERM", "SIGKILL", "SIGINT",
                                                                                     "SIGHUP") else "failed")
        return outcome, entry["signal"], f"died of {entry['signal']}"
    code = entry.get("exit_code")
    if code is None:
        return "stopped", "not started", ""
    if code == 0:
        return "ok", "exit 0", "exited 0"
    if is_root:
        return "root", f"exit {code}", f"exited {code}"
    stopped = bool(cause) and (entry.get("end") or 0) >= (cause.get("end") or float("inf"))  # ended as told to
    return ("stopped" if stopped else "failed"), f"exit {code}", f"exited {code}"


def _spans_from_logs(ref: RankRef, now: float) -> list[Span]:
    """A host without a summary yet (running, or its launcher died): attempts from the log files' times."""
    spans = []
    attempts = log_attempts(ref.rank_dir)
    for attempt in attempts:
        env_log = attempt_file(ref.rank_dir, "env", "log", attempt)
        try:
            start = os.stat(env_log).st_mtime    # written just before the rank started
        except OSError:
            start = None
        current = attempt == attempts[-1]
        try:
            end = now if current else os.stat(log_path(ref, attempt)).st_mtime
        except OSError:
            end = now
        spans.append(Span(attempt, start, end, "running" if current else "failed",
                          "no summary" if current else "restarted"))
    return spans


def collect(run: Run, now: float | None = None) -> list[RankStory]:
    """Every rank's attempts (from its host's summary, else its logs) and metrics (from its logs)."""
    now = time.time() if now is None else now
    stories = []
    for ref in run.ranks:
        story = RankStory(ref)
        summ = run.summaries.get(ref.suffix)
        if summ is not None:
            for attempt in summ.get("attempts") or [{"attempt": 0, "root_cause": summ.get("root_cause"),
                                                     "ranks": summ.get("ranks", [])}]:
                entry = next((r for r in attempt.get("ranks", []) if r.get("rank") == ref.rank), None)
                if entry is None:
                    continue
                outcome, label, detail = span_outcome(entry, attempt.get("root_cause"), ref.rank)
                story.spans.append(Span(int(attempt.get("attempt", 0)), entry.get("start"), entry.get("end"),
                                        outcome, label, detail))
        else:
            story.spans = _spans_from_logs(ref, now)
        for number in log_attempts(ref.rank_dir):
            for name, points in parse_metrics(_read_lines(log_path(ref, number))).items():
                story.metrics.setdefault(name, {})[number] = points
        stories.append(story)
    return stories
