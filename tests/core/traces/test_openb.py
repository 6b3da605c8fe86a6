"""Readers for the openb trace CSV files: good input and every kind of malformed input
(each must name the file, the 1-based line and the field), and the pods of a list no node
of a cluster could ever hold; the real shared files are
read in test_openb_shared_data.py."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from kubesage.core.errors import InputError, TraceFormatError
from kubesage.core.state.unplaceable import never_fit
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.types import NodeSpec, PodRequest

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
POD_HEADER_5 = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


# --------------------------------------------------------------------------- good input


def test_read_pods_full_eleven_columns(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        POD_HEADER + "\n"
        "p-cpu,8000,30517,0,0,,BE,Running,10,20,11\n"
        "p-share,6000,12288,1,460,V100M16|V100M32,LS,Running,427061,12902960,427061\n"
        "p-one,12000,16384,1,1000,,,Running,0,,0\n"
        "p-eight, 88000 ,327680,8,1000,G2,Guaranteed,Pending,,,\n",
    )
    pods = read_pods(path)
    assert pods == [
        PodRequest(
            name="p-cpu",
            cpu_milli=8000,
            memory_mib=30517,
            num_gpu=0,
            gpu_milli=0,
            qos="BE",
            creation_time_s=10.0,
            deletion_time_s=20.0,
        ),
        PodRequest(
            name="p-share",
            cpu_milli=6000,
            memory_mib=12288,
            num_gpu=1,
            gpu_milli=460,
            gpu_models=("V100M16", "V100M32"),
            qos="LS",
            creation_time_s=427061.0,
            deletion_time_s=12902960.0,
        ),
        PodRequest(
            name="p-one",
            cpu_milli=12000,
            memory_mib=16384,
            num_gpu=1,
            gpu_milli=1000,
            qos="LS",  # empty qos falls back to LS
            creation_time_s=0.0,
            deletion_time_s=None,
        ),
        PodRequest(
            name="p-eight",
            cpu_milli=88000,  # surrounding blanks are stripped
            memory_mib=327680,
            num_gpu=8,
            gpu_milli=1000,
            gpu_models=("G2",),
            qos="Guaranteed",
        ),
    ]
    assert [p.is_gpu_sharing for p in pods] == [False, True, False, False]


def test_read_pods_five_columns(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        POD_HEADER_5 + "\np0,12000,16384,1,1000\np1,6000,12288,1,460\np2,4000,8192,0,0\n",
    )
    pods = read_pods(str(path))  # a str path works too
    assert [(p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in pods] == [
        ("p0", 12000, 16384, 1, 1000),
        ("p1", 6000, 12288, 1, 460),
        ("p2", 4000, 8192, 0, 0),
    ]
    for p in pods:
        assert p.gpu_models == ()
        assert p.qos == "LS"
        assert p.creation_time_s is None
        assert p.deletion_time_s is None


def test_read_pods_columns_in_any_order_blank_lines_crlf_and_float_integers(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        "gpu_milli,num_gpu,name,memory_mib,cpu_milli\r\n"
        "500,1,p0,1024,2000\r\n"
        "\r\n"
        "1000.0,2,p1,2048.0,4000\r\n",
    )
    pods = read_pods(path)
    assert [(p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in pods] == [
        ("p0", 2000, 1024, 1, 500),
        ("p1", 4000, 2048, 2, 1000),
    ]
    assert all(isinstance(p.memory_mib, int) for p in pods)


@pytest.mark.parametrize(
    ("spec", "models"),
    [
        ("", ()),
        ("A", ("A",)),
        ("A|B|B", ("A", "B")),
        ("V100M16|V100M32|V100M32", ("V100M16", "V100M32")),
        ("B|A|B|A", ("B", "A")),
        ("A||B", ("A", "B")),
        (" A | B ", ("A", "B")),
        ("nan", ()),  # the trace's README: nan, as pandas writes an empty cell, is no constraint
        ("NaN", ()),
    ],
)
def test_gpu_spec_models(tmp_path: Path, spec: str, models: tuple[str, ...]) -> None:
    path = write(tmp_path, "pods.csv", f"{POD_HEADER}\np0,1000,1024,1,1000,{spec},LS,,,,\n")
    (pod,) = read_pods(path)
    assert pod.gpu_models == models


def test_read_nodes(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nodes.csv",
        NODE_HEADER + "\n"
        "openb-node-0000,64000,262144,2,P100\n"
        "openb-node-0001,96000,393216,8,G2\n"
        "openb-node-0002,32000,262144,0,\n",
    )
    assert read_nodes(path) == [
        NodeSpec(
            name="openb-node-0000",
            cpu_milli=64000,
            memory_mib=262144,
            gpu_count=2,
            gpu_model="P100",
        ),
        NodeSpec(
            name="openb-node-0001", cpu_milli=96000, memory_mib=393216, gpu_count=8, gpu_model="G2"
        ),
        NodeSpec(name="openb-node-0002", cpu_milli=32000, memory_mib=262144, gpu_count=0),
    ]


def test_gzip_files_read_like_plain_ones(tmp_path: Path) -> None:
    pods_text = POD_HEADER + "\np0,1000,1024,1,250,T4|T4,BE,Running,5,9,5\np1,2000,2048,0,0,,,,,,\n"
    nodes_text = NODE_HEADER + "\nn0,104000,524288,2,T4\nn1,32000,262144,0,\n"
    plain_pods = write(tmp_path, "pods.csv", pods_text)
    plain_nodes = write(tmp_path, "nodes.csv", nodes_text)
    gz_pods = tmp_path / "pods.csv.gz"
    gz_nodes = tmp_path / "nodes.csv.gz"
    with gzip.open(gz_pods, "wt", encoding="utf-8", newline="") as out:
        out.write(pods_text)
    with gzip.open(gz_nodes, "wt", encoding="utf-8", newline="") as out:
        out.write(nodes_text)

    pods = read_pods(gz_pods)
    assert pods == read_pods(plain_pods)
    assert [p.name for p in pods] == ["p0", "p1"]
    assert pods[0].gpu_models == ("T4",)
    nodes = read_nodes(gz_nodes)
    assert nodes == read_nodes(plain_nodes)
    assert [(n.name, n.gpu_count, n.gpu_model) for n in nodes] == [
        ("n0", 2, "T4"),
        ("n1", 0, None),
    ]


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    for reader in (read_pods, read_nodes):
        with pytest.raises(InputError, match="no such file") as info:
            reader(path)
        assert str(path) in str(info.value)


# --------------------------------------------------------------------------- malformed input

# (reader, file text, line, field, text that the message must contain)
MALFORMED = [
    pytest.param(
        read_pods,
        "name,cpu_milli,memory_mib,num_gpu\np0,1000,1024,0\n",
        1,
        None,
        "header lacks column(s) gpu_milli",
        id="pod-missing-column",
    ),
    pytest.param(
        read_nodes,
        "sn,cpu_milli,memory_mib,gpu\nn0,1000,1024,0\n",
        1,
        None,
        "header lacks column(s) model",
        id="node-missing-column",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + ",colour\np0,1000,1024,0,0,red\n",
        1,
        None,
        "unknown column(s) colour",
        id="pod-unknown-column",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + ",rack\nn0,1000,1024,0,,r1\n",
        1,
        None,
        "unknown column(s) rack",
        id="node-unknown-column",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,1024,0,0\n\np1,1000,1024,0\n",
        4,  # the blank line 3 still counts
        None,
        "expected 5 fields, found 4",
        id="pod-too-few-fields",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + "\nn0,1000,1024,0,,extra\n",
        2,
        None,
        "expected 5 fields, found 6",
        id="node-too-many-fields",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,1024,0,0\np1,abc,1024,0,0\n",
        3,
        "cpu_milli",
        "not a number: 'abc'",
        id="pod-non-numeric-cpu",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,,1024,0,0\n",
        2,
        "cpu_milli",
        "not a number: ''",
        id="pod-empty-cpu",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + "\nn0,1000,1024,two,G2\n",
        2,
        "gpu",
        "not a number: 'two'",
        id="node-non-numeric-gpu",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,1024,0.5,500\n",
        2,
        "num_gpu",
        "not an integer: '0.5'",
        id="pod-fractional-num-gpu",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + "\nn0,1e20,1024,2,T4\n",
        2,
        "cpu_milli",
        "too large: '1e20'",
        id="node-cpu-beyond-exact-integers",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,-1,0,0\n",
        2,
        "memory_mib",
        "greater than or equal to 0",
        id="pod-negative-memory",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + "\nn0,-8000,1024,0,\n",
        2,
        "cpu_milli",
        "greater than or equal to 0",
        id="node-negative-cpu",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,1024,1,1001\n",
        2,
        "gpu_milli",
        "less than or equal to 1000",
        id="pod-gpu-milli-over-1000",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,1024,0,500\n",
        2,
        None,  # a cross-field rule: no single field is wrong
        "gpu_milli=500 with num_gpu=0",
        id="pod-no-gpu-but-gpu-milli",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,1024,1,0\n",
        2,
        None,
        "num_gpu=1 with gpu_milli=0",
        id="pod-gpu-but-no-gpu-milli",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,1024,2,500\n",
        2,
        None,
        "a multi-GPU pod must take whole GPUs (num_gpu=2, gpu_milli=500)",
        id="pod-multi-gpu-partial",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + "\np0,1000,1024,0,0\np1,1000,1024,0,0\np0,2000,1024,0,0\n",
        4,
        "name",
        "duplicate pod 'p0' (first on line 2)",
        id="pod-duplicate-name",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + "\nn0,1000,1024,0,\nn1,1000,1024,0,\nn1,1000,1024,0,\n",
        4,
        "sn",
        "duplicate node 'n1' (first on line 3)",
        id="node-duplicate-name",
    ),
    pytest.param(read_pods, "", 1, None, "empty file", id="pod-empty-file"),
    pytest.param(read_nodes, "", 1, None, "empty file", id="node-empty-file"),
    pytest.param(read_pods, POD_HEADER + "\n", 1, None, "no pod rows", id="pod-header-only"),
    pytest.param(read_nodes, NODE_HEADER + "\n\n", 1, None, "no node rows", id="node-header-only"),
    pytest.param(
        read_pods,
        POD_HEADER + "\np0,1000,1024,0,0,,LS,Running,100,50,100\n",
        2,
        None,
        "deletion_time_s 50.0 is before creation_time_s 100.0",
        id="pod-deleted-before-created",
    ),
    pytest.param(
        read_pods,
        POD_HEADER + "\np0,1000,1024,0,0,,LS,Running,soon,50,100\n",
        2,
        "creation_time",
        "not a number: 'soon'",
        id="pod-non-numeric-creation-time",
    ),
    pytest.param(
        read_pods,
        POD_HEADER + "\np0,1000,1024,0,0,,LS,Running,nan,50,100\n",
        2,
        "creation_time",
        "not a finite number: 'nan'",
        id="pod-nan-creation-time",
    ),
    pytest.param(
        read_pods,
        POD_HEADER + "\np0,1000,1024,0,0,,LS,Running,10,inf,100\n",
        2,
        "deletion_time",
        "not a finite number: 'inf'",
        id="pod-infinite-deletion-time",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + "\nn0,1000,1024,2,\n",
        2,
        "model",
        "has 2 GPUs but no model",
        id="node-gpus-without-model",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + "\nn0,1000,1024,65,G2\n",
        2,
        "gpu",
        "less than or equal to 64",
        id="node-too-many-gpus",
    ),
    pytest.param(
        read_nodes,
        NODE_HEADER + "\n,1000,1024,0,\n",
        2,
        "sn",
        "at least 1 character",
        id="node-empty-name",
    ),
    pytest.param(
        read_pods,
        POD_HEADER_5 + ",gpu_milli\np0,1000,1024,1,500,1000\n",
        1,
        None,
        "gpu_milli",
        id="pod-repeated-header-column",
    ),
]


@pytest.mark.parametrize(("reader", "text", "line", "field", "message"), MALFORMED)
def test_malformed_input(
    tmp_path: Path, reader, text: str, line: int, field: str | None, message: str
) -> None:
    path = write(tmp_path, "trace.csv", text)
    with pytest.raises(TraceFormatError) as info:
        reader(path)
    exc = info.value
    assert Path(exc.path) == path
    assert exc.line == line
    assert exc.field == field
    text_of_error = str(exc)
    field_part = f", field '{field}'" if field else ""
    assert text_of_error.startswith(f"{path}:{line}{field_part}: ")
    assert message in text_of_error


def test_gpu_node_without_model_names_file_and_line(tmp_path: Path) -> None:
    """The no-model check names the node as well as the file and line."""
    path = write(tmp_path, "nodes.csv", NODE_HEADER + "\nn0,1000,1024,0,\nn1,1000,1024,4,\n")
    with pytest.raises(TraceFormatError) as info:
        read_nodes(path)
    assert info.value.line == 3
    assert str(info.value).startswith(f"{path}:3")
    assert "node 'n1' has 4 GPUs but no model" in str(info.value)


def test_gzip_errors_name_the_gz_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8", newline="") as out:
        out.write(POD_HEADER_5 + "\np0,1000,1024,0,0\np1,1000,1024,x,0\n")
    with pytest.raises(TraceFormatError) as info:
        read_pods(path)
    assert (Path(info.value.path), info.value.line, info.value.field) == (path, 3, "num_gpu")


def test_a_replay_refuses_a_row_without_creation_time_by_line(tmp_path: Path) -> None:
    """A time replay needs every pod's creation time: the first row without one is named;
    the same file reads for the fgd protocol, which takes no times."""
    path = write(
        tmp_path,
        "pods.csv",
        POD_HEADER + "\np0,1000,1024,0,0,,LS,Running,5,,\n\np1,1000,1024,0,0,,LS,Running,,,\n",
    )
    with pytest.raises(TraceFormatError) as info:
        read_pods(path, require_creation_time=True)
    assert (info.value.line, info.value.field) == (4, "creation_time")
    assert "pod 'p1' has no creation time" in str(info.value)
    assert [p.creation_time_s for p in read_pods(path)] == [5.0, None]


def test_cross_field_message_has_no_pydantic_prefix(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER_5 + "\np0,1000,1024,2,500\n")
    with pytest.raises(TraceFormatError) as info:
        read_pods(path)
    assert "Value error" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("pods.csv", gzip.compress(b"name,cpu_milli\n"), "is gzip-compressed (name it .csv.gz)"),
        ("pods.csv.gz", b"name,cpu_milli\n", "is not gzip-compressed (name it without .gz)"),
        (
            "pods.csv.gz",
            gzip.compress((POD_HEADER_5 + "\np,1000,1024,0,0\n").encode())[:-12],
            "damaged gzip stream",
        ),
        (
            "pods.csv",
            (POD_HEADER_5 + "\npod-\xe9,1000,1024,0,0\n").encode("latin-1"),
            "not UTF-8 text",
        ),
    ],
)
def test_a_file_that_is_not_what_its_name_says_is_named(
    tmp_path: Path, name: str, data: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError, match=re.escape(message)) as info:
        read_pods(path)  # every trace reader opens its files through the same rule
    assert str(info.value).startswith(f"{path}: ")


def test_pods_no_node_could_ever_hold_are_counted_by_why(tmp_path: Path) -> None:
    nodes = read_nodes(
        write(tmp_path, "nodes.csv", NODE_HEADER + "\nn0,64000,262144,2,T4\nc0,96000,4096,0,\n")
    )
    pods = read_pods(
        write(
            tmp_path,
            "pods.csv",
            POD_HEADER + "\np0,1000,1024,1,1000,T4|V100M16,,,,,\np1,1000,1024,1,1000,t4,,,,,\n"
            "p2,1000,1024,1,1000,H100|A100,,,,,\np3,1000,1024,1,1000,t4,,,,,\n"
            "p4,1000,1024,1,1000,,,,,,\np5,1000,1024,4,1000,,,,,,\n"
            "p6,128000,1024,0,0,,,,,,\np7,1000,1024,0,0,H100,,,,,\n",
        )
    )
    # p0 may use the T4; the match is exact, as placement's is, so "t4" is no T4; no
    # node has 4 GPUs (p5) or 128 cores (p6); a CPU-only pod's spec constrains nothing (p7).
    assert never_fit(nodes, pods) == {
        "no GPU of an allowed model (t4)": 2,
        "no GPU of an allowed model (H100, A100)": 1,
        "fewer than 4 GPUs on the node": 1,
        "allocatable CPU is below the pod's 128000m": 1,
    }
