"""The reconciler's view of the result caches: each file parsed again only when it changed."""

from __future__ import annotations

import base64
import json
import os

from cnichain.agent.reconcile.attachments import CacheReader

CONF = {"cniVersion": "1.0.0", "name": "net1", "plugins": [{"type": "bridge"}, {"type": "portmap"}]}


def _write(folder: str, cid: str, config: bool = True, extra: str = "") -> str:
    doc = {"kind": "cniCacheV1", "containerId": cid, "ifName": "eth0", "networkName": "net1",
           "netns": f"/run/netns/{cid}", "result": {"cniVersion": "1.0.0"}, "pad": extra}
    if config:
        doc["config"] = base64.b64encode(json.dumps(CONF).encode()).decode()
    path = os.path.join(folder, f"net1-{cid}-eth0")
    tmp = path + ".tmp"  # written aside and renamed, as libcni does: never listed half-written
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)
    return path


def test_unchanged_files_are_not_read_again_and_changed_ones_are(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    a = _write(str(folder), "aaa")
    _write(str(folder), "bbb", config=False)
    (folder / "not-an-entry").write_text("{")
    reader = CacheReader()
    usable, blind = reader.targets([str(tmp_path)])
    assert [t.entry.container_id for t in usable] == ["aaa"] and [e.container_id for e in blind] == ["bbb"]
    assert reader.reads == 3
    first = usable[0]
    usable2, blind2 = reader.targets([str(tmp_path)])
    assert reader.reads == 3  # nothing changed: only stat'ed
    assert usable2[0] is first and [e.container_id for e in blind2] == ["bbb"]
    assert first.still_cached()
    # A re-ADD replaces the file (new inode): read again, and the old target is no longer current.
    _write(str(folder), "aaa", extra="re-added")
    usable3, _ = reader.targets([str(tmp_path)])
    assert reader.reads == 4 and usable3[0] is not first and not first.still_cached()
    # Rewritten in place with another size: read again too.
    with open(a, "r+") as fh:
        doc = json.load(fh)
        doc["pad"] = "rewritten in place, longer"
        fh.seek(0)
        json.dump(doc, fh)
        fh.truncate()
    reader.targets([str(tmp_path)])
    assert reader.reads == 5
    # Deleted: gone from the view and forgotten.
    os.unlink(a)
    usable4, _ = reader.targets([str(tmp_path)])
    assert usable4 == [] and a not in reader.known and reader.reads == 5


def test_scope_filters_without_forgetting(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    _write(str(folder), "aaa")
    reader = CacheReader()
    assert reader.targets([str(tmp_path)], lambda net: net == "other") == ([], [])
    assert [t.entry.container_id for t in reader.targets([str(tmp_path)])[0]] == ["aaa"]
    assert reader.reads == 1

