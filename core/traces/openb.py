"""Readers and a writer for the Alibaba openb GPU trace (cluster-trace-gpu-v2023) CSV files.

Node lists: ``sn,cpu_milli,memory_mib,gpu,model``.
Pod lists: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` and optionally
``gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time`` (some variants
carry only the first five columns). ``gpu_spec`` lists the allowed GPU models joined
by ``|`` (empty = any); times are seconds.

Every row is checked; a bad one raises :class:`TraceFormatError` naming the file,
the 1-based line and the field. Nothing is skipped silently.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import ValidationError

from kubesage.core.errors import InputError, TraceFormatError
from kubesage.core.field_errors import first_problem
from kubesage.core.traces.csv_files import check_header, open_text
from kubesage.core.types import NodeSpec, PodRequest

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_REQUIRED_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL_COLUMNS = (
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)


def _rows(
    path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line_number, row)`` after checking the header names."""
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    with open_text(path) as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceFormatError("empty file, expected a header", path=path, line=1) from None
        header = [name.strip() for name in header]
        check_header(header, path, required=required, optional=optional)
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue  # blank line: carries no record
            if len(row) != len(header):
                raise TraceFormatError(
                    f"expected {len(header)} fields, found {len(row)}", path=path, line=line
                )
            yield line, {name: cell.strip() for name, cell in zip(header, row, strict=True)}


LARGEST_EXACT = 2**53
"""Integers from here on are not exact as the floats the fields are read through (and
no CPU, memory or GPU figure of a real node or pod comes near it)."""


def _int(value: str, *, path: Path, line: int, field: str) -> int:
    try:
        number = float(value)
    except ValueError:
        raise TraceFormatError(
            f"not a number: {value!r}", path=path, line=line, field=field
        ) from None
    if not number.is_integer():
        raise TraceFormatError(f"not an integer: {value!r}", path=path, line=line, field=field)
    if abs(number) >= LARGEST_EXACT:
        raise TraceFormatError(
            f"too large: {value!r} (at most {LARGEST_EXACT - 1:,})",
            path=path,
            line=line,
            field=field,
        )
    return int(number)


def _optional_float(value: str, *, path: Path, line: int, field: str) -> float | None:
    if value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise TraceFormatError(
            f"not a number: {value!r}", path=path, line=line, field=field
        ) from None
    if not math.isfinite(number):
        raise TraceFormatError(f"not a finite number: {value!r}", path=path, line=line, field=field)
    return number


# Spec attribute → the CSV column it comes from, so errors name the user's column.
_COLUMN_OF = {
    "gpu_count": "gpu",
    "gpu_model": "model",
    "creation_time_s": "creation_time",
    "deletion_time_s": "deletion_time",
    "gpu_models": "gpu_spec",
}


def _validation_error(
    exc: ValidationError, *, path: Path, line: int, name_column: str
) -> TraceFormatError:
    problem = first_problem(exc)
    attribute = problem.field
    column = _COLUMN_OF.get(attribute, attribute) if attribute != "name" else name_column
    return TraceFormatError(problem.message, path=path, line=line, field=column or None)


def read_nodes(path: Path | str) -> list[NodeSpec]:
    """Read an openb node list (``openb_node_list_*.csv``)."""
    path = Path(path)
    nodes: list[NodeSpec] = []
    seen: dict[str, int] = {}
    for line, row in _rows(path, NODE_COLUMNS):
        name = row["sn"]
        if name in seen:
            raise TraceFormatError(
                f"duplicate node '{name}' (first on line {seen[name]})",
                path=path,
                line=line,
                field="sn",
            )
        seen[name] = line
        gpu_count = _int(row["gpu"], path=path, line=line, field="gpu")
        if gpu_count > 0 and not row["model"]:
            raise TraceFormatError(
                f"node '{name}' has {gpu_count} GPUs but no model",
                path=path,
                line=line,
                field="model",
            )
        try:
            nodes.append(
                NodeSpec(
                    name=name,
                    cpu_milli=_int(row["cpu_milli"], path=path, line=line, field="cpu_milli"),
                    memory_mib=_int(row["memory_mib"], path=path, line=line, field="memory_mib"),
                    gpu_count=gpu_count,
                    gpu_model=row["model"] or None,
                )
            )
        except ValidationError as exc:
            raise _validation_error(exc, path=path, line=line, name_column="sn") from None
    if not nodes:
        raise TraceFormatError("no node rows", path=path, line=1)
    return nodes


def read_pods(path: Path | str, *, require_creation_time: bool = False) -> list[PodRequest]:
    """Read an openb pod list (``openb_pod_list_*.csv``), in file order.

    ``require_creation_time``: refuse a row without ``creation_time`` (the time replay
    places each pod at its creation time, so such a row could not be replayed)."""
    path = Path(path)
    pods: list[PodRequest] = []
    seen: dict[str, int] = {}
    for line, row in _rows(path, POD_REQUIRED_COLUMNS, POD_OPTIONAL_COLUMNS):
        name = row["name"]
        if name in seen:
            raise TraceFormatError(
                f"duplicate pod '{name}' (first on line {seen[name]})",
                path=path,
                line=line,
                field="name",
            )
        seen[name] = line
        if require_creation_time and not row.get("creation_time"):
            raise TraceFormatError(
                f"pod '{name}' has no creation time, which a time replay needs "
                "(the fgd mode replays pod lists without times)",
                path=path,
                line=line,
                field="creation_time",
            )
        spec = row.get("gpu_spec", "")
        if spec.strip().lower() == "nan":  # an empty cell as pandas writes it: no constraint
            spec = ""
        # dict.fromkeys keeps order and drops repeats such as "V100M16|V100M32|V100M32".
        models = tuple(dict.fromkeys(m.strip() for m in spec.split("|") if m.strip()))
        try:
            pods.append(
                PodRequest(
                    name=name,
                    cpu_milli=_int(row["cpu_milli"], path=path, line=line, field="cpu_milli"),
                    memory_mib=_int(row["memory_mib"], path=path, line=line, field="memory_mib"),
                    num_gpu=_int(row["num_gpu"], path=path, line=line, field="num_gpu"),
                    gpu_milli=_int(row["gpu_milli"], path=path, line=line, field="gpu_milli"),
                    gpu_models=models,
                    qos=row.get("qos") or "LS",
                    creation_time_s=_optional_float(
                        row.get("creation_time", ""), path=path, line=line, field="creation_time"
                    ),
                    deletion_time_s=_optional_float(
                        row.get("deletion_time", ""), path=path, line=line, field="deletion_time"
                    ),
                )
            )
        except ValidationError as exc:
            raise _validation_error(exc, path=path, line=line, name_column="name") from None
    if not pods:
        raise TraceFormatError("no pod rows", path=path, line=1)
    return pods


def write_pods(
    pods: Sequence[PodRequest], path: Path | str, *, gzipped: bool | None = None
) -> None:
    """Write ``pods`` as an openb pod list with all eleven columns, readable by
    :func:`read_pods` (times left empty where a pod has none; no phase or scheduled
    time: the simulator does not read them); gzip-compressed when ``gzipped`` (by
    default, when the name ends in ``.gz``, as :func:`read_pods` expects)."""
    if gzipped is None:
        gzipped = str(path).endswith(".gz")
    with (
        gzip.open(path, "wt", encoding="utf-8", newline="")
        if gzipped
        else open(path, "w", encoding="utf-8", newline="")
    ) as handle:
        writer = csv.writer(handle)
        writer.writerow(POD_REQUIRED_COLUMNS + POD_OPTIONAL_COLUMNS)
        for pod in pods:
            writer.writerow(
                [
                    pod.name, pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli,
                    "|".join(pod.gpu_models), pod.qos, "",
                    _time(pod.creation_time_s), _time(pod.deletion_time_s), "",
                ]
            )  # fmt: skip


def _time(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return str(int(seconds)) if float(seconds).is_integer() else repr(seconds)
