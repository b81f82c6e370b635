"""common/leanjson.py against the json package: the same values, the same errors, the same text."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cnichain.common import leanjson
from cnichain.common.skel import valid_name

DOCUMENTS = [
    b'{"a": 1, "b": [1, 2.5, "x\\u00e9", null, true, false, {}], "c": {"d": []}}',
    b' \t\n{"a":1} \r\n', "{\"a\":\"\u00e9\"}".encode(), b'{"a": NaN, "b": -Infinity, "c": Infinity}',
    b'{"a": 1e400, "b": -0.0, "c": 12345678901234567890}', b'{"a":1,"a":2}', b'1', b'"x"', b'[]',
    # refused by json, each with its own message
    b'{', b'', b'   ', b'{"a":1} x', b'[1,2', b'{"a" 1}', b'nul', b'{"a":1}\x00', b'{"a": "\t"}',
    b'{"a": "\xff"}', b'"\\ud800"', b'[' * 100000 + b']' * 100000,
    # other encodings json.loads detects
    b'\xef\xbb\xbf{"a":1}', '{"a":1}'.encode("utf-16"), '{"a":1}'.encode("utf-32"), '{"a":1}'.encode("utf-16-le"),
]


def _outcome(fn, *args, **kwargs):
    try:
        return "ok", repr(fn(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - the exception is the thing compared
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("doc", DOCUMENTS + [d.decode("utf-8", "replace") for d in DOCUMENTS[:8]] + ["\ufeff{}"],
                         ids=range(len(DOCUMENTS) + 9))
def test_loads_is_json_loads(doc):
    assert _outcome(leanjson.loads, doc) == _outcome(json.loads, doc)
    hook = lambda pairs: ("pairs", pairs)  # noqa: E731
    assert _outcome(leanjson.loads, doc, object_pairs_hook=hook) == _outcome(json.loads, doc, object_pairs_hook=hook)


VALUES = [
    {"a": 1, "b": [1, 2.5, "x\u00e9\n<>&\u2028", None, True, False, {}, [], ()], "c": {"z": 1, "d": []}},
    [], {}, "s", 1, -1.5, float("nan"), float("inf"), -float("inf"), (1, 2), [[[]]], {"k": [{"x": 1e-7}]},
    True, None, 10 ** 30, {"b": 1, "a": {"d": 2, "c": [3]}},
    {1: 2}, {"a": {1, 2}}, {"a": object()}, {None: 1, "b": 2},  # left to json.dumps
]
OPTIONS = [{}, {"indent": 4}, {"indent": 1, "sort_keys": True}, {"separators": (",", ":")}, {"indent": 0},
           {"sort_keys": True}]


@pytest.mark.parametrize("options", OPTIONS, ids=[repr(o) for o in OPTIONS])
@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_is_json_dumps(value, options):
    assert _outcome(leanjson.dumps, value, **options) == _outcome(json.dumps, value, **options)


def test_errors_are_jsons_in_a_process_that_had_not_imported_json():
    code = ("from cnichain.common import leanjson\n"
            "for doc in (b'{', b'[1,', b'{\"a\" 1}', b'1 x'):\n"
            "    try:\n"
            "        leanjson.loads(doc)\n"
            "    except ValueError as exc:\n"
            "        print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}\n{code}"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    expected = []
    for doc in (b"{", b"[1,", b'{"a" 1}', b"1 x"):
        with pytest.raises(json.JSONDecodeError) as exc:
            json.loads(doc)
        expected.append(f"JSONDecodeError {exc.value}")
    assert out == expected


def test_a_plain_document_never_imports_json():
    code = ("import sys; from cnichain.common import leanjson;"
            "v = leanjson.loads(b'{\"a\": [1, 2.5, \"x\"], \"b\": null}'); leanjson.dumps(v, indent=4);"
            "print(sorted(m for m in ('json', 're', 'enum') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; {code}"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name,ok", [
    ("abc", True), ("a.b-c_d", True), ("0x", True), ("A" * 300, True),
    ("", False), ("-a", False), ("_a", False), (".a", False), ("a b", False), ("a/b", False),
    ("abc\n", False), ("é", False), ("a\x00", False),
])
def test_valid_name_is_libcnis_pattern(name, ok):
    assert valid_name(name) is ok
