"""The one kernel-error path (common.kernel_errors) and the one undo stack (common.rollback)."""

from __future__ import annotations

import errno

import pytest

from cnichain.common import skel
from cnichain.common.errors import CniError, Code
from cnichain.common.kernel_errors import KernelError, NftError, errno_of, failures, go_text, reported_as
from cnichain.common.rollback import Rollback
from tests.helpers import dispatch

from pyroute2.netlink.exceptions import NetlinkError  # noqa: E402 - a dependency, never skipped


def test_netlink_error_is_caught_and_worded_as_go():
    with pytest.raises(KernelError) as info:
        with reported_as('failed to create bridge "cni0"'):
            raise NetlinkError(errno.EEXIST)
    err = info.value
    assert (err.code, err.msg, err.errno) == (Code.INTERNAL, 'failed to create bridge "cni0": file exists', errno.EEXIST)


def test_os_error_is_a_kernel_failure_too():
    with pytest.raises(KernelError) as info:
        with reported_as("open /proc/sys/net/x"):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
    assert info.value.msg == "open /proc/sys/net/x: no such file or directory"
    assert info.value.code == 999
    assert info.value.errno == errno.ENOENT


def test_c_library_wording_kept_when_asked():
    err = KernelError.of(NetlinkError(errno.ENETUNREACH), "failed to add route", go=False)
    assert err.msg == "failed to add route: Network is unreachable"
    assert err.code == 999


def test_a_bug_is_not_disguised_as_a_kernel_error():
    with pytest.raises(TypeError):
        with reported_as('failed to create bridge "cni0"'):
            raise TypeError("link() got an unexpected keyword argument 'kind'")


def test_cni_errors_pass_through_untouched():
    inner = CniError(Code.INVALID_NETWORK_CONFIG, "bad")
    with pytest.raises(CniError) as info:
        with reported_as("context"):
            raise inner
    assert info.value is inner


def test_errno_of_ignores_cni_codes():
    # A CniError's ``code`` is a CNI code (3 = unknown container), not ESRCH.
    assert errno_of(CniError(3, "x")) is None
    assert errno_of(NetlinkError(errno.ENODEV)) == errno.ENODEV
    assert go_text(NetlinkError(errno.ENODEV)) == "no such device"


def test_failures_without_pyroute2_loaded_is_os_error_only(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "pyroute2.netlink.exceptions")
    assert failures() == (OSError,)


def test_rewrap_keeps_errno_and_reason():
    err = KernelError.of(NetlinkError(errno.EEXIST), "create qdisc")
    again = err.rewrap(f"create ifb qdisc: {err.context}")
    assert (again.msg, again.errno) == ("create ifb qdisc: create qdisc: file exists", errno.EEXIST)
    assert again.code == 999


def test_nft_error_recovers_errno_from_text():
    err = NftError("nft", "Error: Could not process rule: Device or resource busy")
    assert err.errno == errno.EBUSY and err.msg.startswith("nft: Error: Could not process rule")
    assert err.code == 999
    assert NftError("nft", "Error: syntax error").errno is None


def test_rollback_runs_newest_first_and_reports_the_first_failure():
    done: list[str] = []

    def fail(what: str) -> None:
        done.append(what)
        raise NetlinkError(errno.EBUSY)

    undo = Rollback()
    undo.push("a", lambda: done.append("a"))
    undo.push("b", lambda: fail("b"))
    undo.push("c", lambda: fail("c"))
    first = undo.unwind()
    assert done == ["c", "b", "a"]
    assert isinstance(first, NetlinkError) and done.index("c") == 0
    assert undo.first_error is first and len(undo) == 0


def test_rollback_does_not_swallow_bugs():
    undo = Rollback()
    undo.push("bad", lambda: None + 1)  # type: ignore[operator]
    with pytest.raises(TypeError):
        undo.unwind()


def test_rollback_block_unwinds_on_any_exception_and_keeps_work_otherwise():
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with Rollback() as undo:
            undo.push("a", done.append, "a")
            undo.push("b", done.append, "b")
            raise KeyboardInterrupt
    assert done == ["b", "a"] and len(undo) == 0
    done.clear()
    with Rollback() as undo:
        undo.push("a", done.append, "a")
    assert done == [] and len(undo) == 1


def test_rollback_binds_arguments_when_pushed():
    done: list[int] = []
    with pytest.raises(RuntimeError):
        with Rollback() as undo:
            for i in range(3):
                undo.push(f"step {i}", done.append, i)
            raise RuntimeError
    assert done == [2, 1, 0]


def _typeerror_in_kernel_call(req: skel.Request):
    with reported_as('failed to create bridge "cni0"'):
        raise TypeError("IPRoute.link() got an unexpected keyword argument")


def test_unexpected_error_under_a_kernel_context_surfaces_as_internal():
    plugin = skel.Plugin(name="fake", add=_typeerror_in_kernel_call, delete=_typeerror_in_kernel_call)
    code, out = dispatch(plugin, "ADD", {"cniVersion": "1.0.0", "name": "n", "type": "fake"})
    assert code == 1 and out["code"] == Code.INTERNAL
    assert out["msg"].startswith("fake: unexpected error: ") and "failed to create bridge" not in out["msg"]
    assert out["details"] == "TypeError"
