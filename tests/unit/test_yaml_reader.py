"""Bad input never hangs and never shows a traceback: every reader of a user's YAML (`kfed
validate`, `kfed simulate`, `kfed submit`, worker kubeconfigs, the validating webhook) refuses
alias bombs, deep nesting, bytes that are not UTF-8, lists and bad queue-name labels at once,
with one line that names the document."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manager.api import manifest
from manager.api.manifest import load_text, split_documents
from manager.cli.main import main
from manager.controllers.webhooks import MUTATE_JOB_PATH, VALIDATE_PATH, make_app, validate
from manager.multikueue.rules.kubeconfig import KubeconfigRejectedError, parse_kubeconfig

LABEL_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character, with at most 63 characters"
)


def alias_bomb() -> bytes:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    return ("\n".join(lines) + "\n").encode()


JOB_WITH_BAD_QUEUE = (
    b"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n  labels: {kueue.x-k8s.io/queue-name: 'team a!'}\n"
    b"spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: busybox}]\n"
)

# (case, the file's bytes, the one line after "<file>", exactly)
CASES: list[tuple[str, bytes, str]] = [
    ("alias-bomb", alias_bomb(), "[0]: refused: line 6: aliases expand the document beyond 100056 nodes"),
    ("too-many-aliases", b"a: &a x\nb: [" + b",".join([b"*a"] * 1001) + b"]\n", "[0]: refused: more than 1000 aliases"),
    ("recursive-alias", b"a: &a [*a]\n", "[0]: refused: line 1: an alias refers to a node that contains it"),
    ("flow-nesting", b"[" * 20000 + b"]" * 20000, "[0]: refused: line 1: nested deeper than 128 levels"),
    ("mapping-nesting", b"{a: " * 20000 + b"}" * 20000, "[0]: refused: line 1: nested deeper than 128 levels"),
    ("block-nesting", b"- " * 20000 + b"x\n", "[0]: refused: line 1: nested deeper than 128 levels"),
    ("not-utf8", b"apiVersion: v1\nkind: \xff\xfe\n", "[0]: refused: not UTF-8: byte 0xff at offset 21"),
    (
        "bare-list",
        b"- apiVersion: v1\n  kind: Namespace\n",
        "[0]: a manifest must be one object (a mapping with apiVersion and kind), not a list",
    ),
    (
        "list-kind",
        b"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n",
        "[0] List/?: kind: a List is not read: write each of its items as a YAML document of its own",
    ),
    (
        "bad-queue-label",
        JOB_WITH_BAD_QUEUE,
        f'[0] Job/j: metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "team a!": {LABEL_RULE}',
    ),
    ("syntax", b"kind: ClusterQueue\nmetadata: {name: [\n", "[0]: invalid YAML: line 3: did not find expected node content"),
]


@pytest.mark.parametrize(("case", "content", "line"), CASES, ids=[case[0] for case in CASES])
@pytest.mark.parametrize("command", ["validate", "simulate", "submit"])
def test_every_command_refuses_bad_input_in_one_line_within_a_second(
    command: str, case: str, content: bytes, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(content)
    # submit reads the file before it connects anywhere; the kubeconfig is never reached.
    extra = ["--kubeconfig", str(tmp_path / "unused")] if command == "submit" else []
    started = time.monotonic()
    code = main([command, "-f", str(path), *extra])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 1 and elapsed < 1.0
    expected = f"error: {path}{line}" if command == "submit" else f"{path}{line}"
    # `kfed validate` ends with its count, "1 error(s) in 0 object(s)".
    assert [text for text in err.splitlines() if not text.endswith(" object(s)")] == [expected]


def test_validate_names_the_deep_document_among_several(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_bytes(b"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\n---\n" + b"[" * 20000)
    assert main(["validate", "-f", str(path)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == f"{path}[1]: refused: line 5: nested deeper than 128 levels"


def test_input_larger_than_the_cap_is_refused_unread() -> None:
    loaded = load_text(b"a: " + b"x" * manifest.MAX_YAML_BYTES, "huge.yaml")
    assert [str(error) for error in loaded.errors] == ["huge.yaml[0]: refused: larger than 64 MiB"]


def test_an_anchor_used_a_few_times_is_accepted() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n  resourceGroups:\n"
        "  - coveredResources: [cpu]\n    flavors:\n    - name: a\n      resources: &quota [{name: cpu, nominalQuota: 4}]\n"
        "    - name: b\n      resources: *quota\n"
    )
    loaded = load_text(text, "anchors.yaml")
    assert not loaded.errors and len(loaded.objects) == 1


def test_the_validating_webhook_refuses_a_bad_queue_label_naming_the_field() -> None:
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "-bad-"}},
        "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]},
    }
    response = validate({"request": {"uid": "1", "operation": "CREATE", "object": workload}})["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        f'Workload.kueue.x-k8s.io "w" is invalid: metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "-bad-": {LABEL_RULE}'
    )


def test_yaml_is_read_by_libyaml() -> None:
    # The project's PyYAML wheel bundles libyaml; without it `kfed simulate` is ten times slower.
    assert yaml.__with_libyaml__ and manifest._LOADER is yaml.CSafeLoader


# --- random and adversarial documents ------------------------------------------------------------------
FRAGMENTS = [
    "[", "]", "{", "}", "- ", ": ", ", ", "\n", "  ", "&a ", "*a", "&b ", "*b", "? ", "'", '"', "!!python/object:os.system ",
    "!!binary ", "%YAML 1.1\n", "---\n", "...\n", "|\n", ">-\n", "#", "\t", "apiVersion: v1\n", "kind: List\n", "kind: Job\n",
    "apiVersion: kueue.x-k8s.io/v1beta2\n", "kind: ClusterQueue\n", "metadata: {name: x}\n", "items: []\n", "0x1f", "1e400",
    "~", "<<: *a\n", "\x00", "\ufeff", "\u2028",
]  # fmt: skip

adversarial_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=200).map("".join)
json_like: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=50,
)
dumped = json_like.map(lambda data: yaml.safe_dump(data))
inputs = st.one_of(st.binary(max_size=2000), adversarial_text.map(str.encode), dumped.map(str.encode))


def bounded(call: Any) -> None:
    """Run `call`; it must finish within a second and allocate at most 64 MiB at its peak."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        call()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.monotonic() - started < 1.0
    assert peak < 64 * 1024 * 1024


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs)
def test_no_input_makes_a_reader_raise_hang_or_grow(content: bytes) -> None:
    def read_manifests() -> None:
        loaded = load_text(content, "fuzz.yaml")
        assert all("\n" not in str(error) and str(error).startswith("fuzz.yaml[") for error in loaded.errors)
        _, errors = split_documents(content, "fuzz.yaml")
        assert len(errors) <= 1

    def read_kubeconfig() -> None:
        try:
            parse_kubeconfig(content)
        except KubeconfigRejectedError as err:
            assert "\n" not in str(err) and err.reason in ("BadKubeConfig", "InsecureKubeConfig")

    bounded(read_manifests)
    bounded(read_kubeconfig)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=2, max_value=9), st.integers(min_value=2, max_value=12), st.booleans())
def test_alias_bombs_of_any_shape_are_refused_quickly(width: int, levels: int, in_mappings: bool) -> None:
    def refs(level: int) -> str:
        alias = f"*l{level - 1}"
        return "[" + ", ".join(f"{{k{i}: {alias}}}" if in_mappings else alias for i in range(width)) + "]"

    content = "\n".join(["l0: &l0 x", *(f"l{level}: &l{level} {refs(level)}" for level in range(1, levels + 1))]).encode()

    def read() -> None:
        loaded = load_text(content, "bomb.yaml")
        if width**levels > 2 * manifest.ALIAS_EXPANSION_ALLOWANCE:
            assert [str(error).split(": line")[0] for error in loaded.errors] == ["bomb.yaml[0]: refused"]

    bounded(read)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"[" * 20000 + b"]" * 20000, "the body is nested too deeply"),
        (b'{"a": ' * 20000 + b"1" + b"}" * 20000, "the body is nested too deeply"),
        (b"\xff\xfe not json", "the body is not JSON"),
        (b"[1, 2]", "the body is not an AdmissionReview or ConversionReview object"),
    ],
)
async def test_the_webhook_server_answers_bad_bodies_with_400(body: bytes, error: str) -> None:
    async def never(namespace: str, queue: str) -> bool:
        return False

    app = make_app(uses_multikueue=never)
    async with TestClient(TestServer(app)) as client:
        for path in (VALIDATE_PATH, MUTATE_JOB_PATH):
            started = time.monotonic()
            response = await client.post(path, data=body, headers={"Content-Type": "application/json"})
            assert (response.status, await response.json()) == (400, {"error": error})
            assert time.monotonic() - started < 1.0
