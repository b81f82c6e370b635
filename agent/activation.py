"""Listening sockets handed over by systemd (socket activation), with ``sd_listen_fds`` semantics.

With ``deploy/cnichain-agent.socket`` systemd owns ``/run/cnichain/agent.sock``: it creates it
(root-only) at boot, before the runtimes start, and starts the agent on the first connection --
the first plugin exec after boot, typically containerd's first STATUS poll -- passing the listening
socket as fd 3 with ``LISTEN_FDS``/``LISTEN_PID`` (and its name, ``FileDescriptorName=``, in
``LISTEN_FDNAMES``).  That first exec's shim waits in the socket's backlog while the agent warms up
and is answered warm, or, past the shim's ACK deadline, runs cold as it would without an agent.
Because systemd keeps the socket open across agent restarts, a connection made while the agent is
restarting waits for the next one instead of being refused.

:func:`listen_fds` is ``sd_listen_fds_with_names(unset_environment=1)``: the variables are only for
us when ``LISTEN_PID`` is our pid (else they were meant for a parent, and are ignored), they are
removed from the environment either way (workers, plugins and delegates must not see them), and
the descriptors become close-on-exec.  :func:`assign` then decides what each socket serves: by its
name (:data:`NAME_CNI`, :data:`NAME_METRICS`) or, for a socket without one of ours (systemd names it
after its unit by default), by the path it is bound to.  Anything that does not fit -- not a
listening unix stream socket, a path other than the configured one, a socket file others could
connect to (group or other write permission), two sockets for one job, a name list that does not
match the count -- stops the agent with a message, rather than serving where the shims do not look.
"""

from __future__ import annotations

import os
import socket
import stat
from typing import Mapping, MutableMapping, Optional

SD_LISTEN_FDS_START = 3
ENV_PID, ENV_FDS, ENV_NAMES = "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"
NAME_CNI = "cni"  # FileDescriptorName= of the shims' socket (deploy/cnichain-agent.socket)
NAME_METRICS = "metrics"  # ... of a metrics socket, when a unit passes one too
MAX_FDS = 16  # more than we could ever use; a larger count is a misconfiguration


def _fail(message: str) -> SystemExit:
    return SystemExit(f"cnichain-agent: socket activation: {message}")


def listen_fds(environ: Optional[MutableMapping[str, str]] = None,
               first_fd: int = SD_LISTEN_FDS_START) -> list[tuple[socket.socket, str]]:
    """The listening sockets passed to this process, each with its name ("unknown" when unnamed).

    ``first_fd`` is systemd's fixed 3; tests may place their descriptors elsewhere.
    """
    env = os.environ if environ is None else environ
    pid_text, count_text, names_text = env.pop(ENV_PID, None), env.pop(ENV_FDS, None), env.pop(ENV_NAMES, None)
    if not pid_text or not count_text:
        return []
    try:
        pid, count = int(pid_text), int(count_text)
    except ValueError:
        raise _fail(f"{ENV_PID}={pid_text!r} {ENV_FDS}={count_text!r} are not numbers") from None
    if pid != os.getpid():
        return []  # meant for another process (we were started by one that got them)
    if count <= 0:
        return []
    if count > MAX_FDS:
        raise _fail(f"{ENV_FDS}={count}: at most {MAX_FDS} sockets are expected")
    names = names_text.split(":") if names_text is not None else ["unknown"] * count
    if len(names) != count:
        raise _fail(f"{ENV_NAMES} names {len(names)} socket(s) but {ENV_FDS} is {count}")
    out = []
    for i, name in enumerate(names):
        fd = first_fd + i
        try:
            os.set_inheritable(fd, False)
            sock = socket.socket(fileno=fd)
        except OSError as exc:
            raise _fail(f"descriptor {fd} ({name}) is not a socket: {exc.strerror}") from None
        if (sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM
                or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
            raise _fail(f"descriptor {fd} ({name}) is not a listening unix stream socket")
        out.append((sock, name or "unknown"))
    return out


def _bound_path(sock: socket.socket) -> str:
    name = sock.getsockname()
    return name if isinstance(name, str) else os.fsdecode(name)


def _check_private(path: str) -> None:
    """The socket file must be root's and connectable by nobody else: connecting takes write
    permission, so no group or other write bit (SocketMode=0600; systemd's default is 0666)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _fail(f"{path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise _fail(f"{path} must be a socket owned by root that others cannot write to (SocketMode=0600)")


def assign(passed: list[tuple[socket.socket, str]], paths: Mapping[str, str]) -> dict[str, tuple[socket.socket, str]]:
    """{job: (socket, path)} for the passed sockets; ``paths`` maps each job (:data:`NAME_CNI`,
    :data:`NAME_METRICS`) to the path the agent is configured to serve it on ("" if it is not)."""
    jobs: dict[str, tuple[socket.socket, str]] = {}
    for sock, name in passed:
        path = _bound_path(sock)
        if name in paths:
            job = name
        else:
            job = next((j for j, p in paths.items() if p and p == path), "")
        if not job:
            raise _fail(f"a socket named {name!r} at {path or '(unnamed)'} serves none of "
                        f"{', '.join(p for p in paths.values() if p)}")
        if not paths[job]:
            raise _fail(f"a {job} socket was passed but the agent is configured without one")
        if path != paths[job]:
            raise _fail(f"the {job} socket is at {path!r}, the agent is configured for {paths[job]!r} "
                        "(keep ListenStream= and --socket in step)")
        if job in jobs:
            raise _fail(f"two sockets were passed for {job}")
        _check_private(path)
        jobs[job] = (sock, path)
    return jobs
