"""Reaching a deployment's directory from a process outside it, on any machine.

The command line (``greenroom nodes``, a command to a runtime running on a SQLite store)
and the console talk to a runtime's or a leader's directory at ``HOST:PORT``, its admin.
Thespian's own way in, ``ActorSystem("multiprocTCPBase", {"Admin Port": PORT})``, looks for
an admin on *this* machine: with the leader's address as its own it binds an address this
machine does not have (``OSError: [Errno 99] Cannot assign requested address`` on a
member's machine), and where no admin listens it forks one, which then runs on, answering
"no nodes" for a deployment it is not part of.

``RemoteDirectory`` does neither. It binds one endpoint on the address of this machine that
packets to ``HOST`` leave from (``HOST`` itself when it is this machine's, the loopback
for the loopback), with the deployment's key, asks the admin there for the directory by
its global name, and asks the directory; it never starts an admin, and everything is
bounded by the given timeout. The admin must be able to connect back to that address (it
answers on a connection of its own, as Thespian does).

What goes wrong is said in one line (``Unreachable``): a name that does not resolve,
nothing listening at the address, an address that does not answer, an admin that does not
answer (another key, or not a greenroom deployment).
"""

from __future__ import annotations

import socket
import time
from datetime import timedelta
from typing import Any

from ..errors import ConfigurationError
from ..wire import transport
from .names import DIRECTORY_NAME

__all__ = ["RemoteDirectory", "Unreachable", "ask_once", "connect", "local_address_toward"]

_DIRECTORY_CLASS = "actors.cluster.directory.DirectoryActor"


class Unreachable(Exception):
    """The admin or its directory cannot be reached or did not answer; the message says which."""


def _resolve(host: str) -> str:
    try:
        return str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError) as exc:
        raise Unreachable(f"cannot resolve {host!r}: {exc}") from None


def local_address_toward(address: str) -> str:
    """The address of this machine that packets to ``address`` (an IPv4 address) leave
    from: ``address`` itself when it is one of this machine's, the loopback for the loopback.
    No packet is sent (a UDP socket is connected, which only picks the route)."""
    if address.startswith("127."):
        return address
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, 9))
        except OSError as exc:
            raise Unreachable(f"no route to {address}: {exc}") from None
        return str(probe.getsockname()[0])


def _listening(address: str, port: int, timeout: float) -> None:
    """Fail at once, saying why, when nothing listens at ``address:port`` or it does not answer."""
    try:
        with socket.create_connection((address, port), timeout=max(0.1, min(timeout, 5.0))):
            pass
    except ConnectionRefusedError:
        raise Unreachable(f"nothing listens at {address}:{port} (connection refused)") from None
    except TimeoutError:
        raise Unreachable(f"{address}:{port} did not answer within {min(timeout, 5.0):g} s (unreachable?)") from None
    except OSError as exc:
        raise Unreachable(f"cannot connect to {address}:{port}: {exc.strerror or exc}") from None


class RemoteDirectory:
    """The directory of the runtime or leader whose admin is ``host:port``; see the module docstring.

    ``key`` is the deployment's; this process's transport is installed with it on first use
    (one key and one address per process: ``ConfigurationError`` when another was installed).
    Calls are not thread-safe: one caller at a time."""

    def __init__(self, host: str, port: int, key: bytes, timeout: float = 10.0) -> None:
        self.address = _resolve(host)
        self.port = port
        self.where = f"{host}:{port}"
        bind = local_address_toward(self.address)
        transport.install(bind, key)
        _listening(self.address, port, timeout)
        from thespian.system.transport import ExternalInterfaceTransportInit
        from thespian.system.transport.TCPTransport import TCPTransport

        self._transport = TCPTransport(ExternalInterfaceTransportInit(), {"Admin Port": port}, None, None)
        self._admin = TCPTransport.getAddressFromString((self.address, port))
        self._directory: Any = None
        self._count = 0

    def directory(self, timeout: float) -> Any:
        """The directory's address (asked of the admin once, by its global name)."""
        if self._directory is None:
            from thespian.system.messages.admin import PendingActor
            from thespian.system.systemBase import NewActorResponse
            from thespian.system.transport import TransmitIntent

            self._count += 1
            response = NewActorResponse(self._transport, self._admin)
            request = PendingActor(_DIRECTORY_CLASS, None, self._count, None, globalName=DIRECTORY_NAME)
            self._transport.scheduleTransmit(None, TransmitIntent(self._admin, request, onError=response.transmit_failed))
            deadline = time.monotonic() + timeout
            while response.pending and (left := deadline - time.monotonic()) > 0:
                self._transport.run(response, timedelta(seconds=left))
            if not response.actor_address:
                raise Unreachable(self._silent(timeout))
            self._directory = response.actor_address
        return self._directory

    def ask(self, message: Any, timeout: float) -> Any:
        """Send ``message`` to the directory and return its answer (``Unreachable`` if none comes
        within ``timeout`` seconds, the directory's lookup included)."""
        from thespian.system.systemBase import BaseContext

        deadline = time.monotonic() + timeout
        directory = self.directory(timeout)
        answer = BaseContext(self._admin, self._transport).ask(directory, message, max(0.0, deadline - time.monotonic()))
        if answer is None:
            raise Unreachable(f"the directory at {self.where} did not answer within {timeout:g} s")
        return answer

    def _silent(self, timeout: float) -> str:
        return (
            f"the admin at {self.where} did not answer within {timeout:g} s: another deployment key "
            "($GREENROOM_KEY), not a greenroom runtime or node, or it cannot connect back to this machine"
        )

    def close(self) -> None:
        """Close this process's endpoint (the runtime and its admin go on: nothing is shut down)."""
        self._transport.close()


def connect(host: str, port: int, key: bytes | None, timeout: float) -> RemoteDirectory:
    """A ``RemoteDirectory``, with every error of its set-up as ``Unreachable`` (no key given
    and none in ``$GREENROOM_KEY``/``$GREENROOM_KEY_FILE``, another transport already
    installed in this process)."""
    try:
        key = key if key is not None else transport.load_key()
        if key is None:
            raise Unreachable("no deployment key: set $GREENROOM_KEY or $GREENROOM_KEY_FILE")
        return RemoteDirectory(host, port, key, timeout)
    except (ConfigurationError, OSError) as exc:
        raise Unreachable(f"cannot reach {host}:{port}: {exc}") from None


def ask_once(host: str, port: int, key: bytes | None, message: Any, timeout: float) -> Any:
    """Connect, ask the directory ``message``, close; its answer, or ``Unreachable``."""
    remote = connect(host, port, key, timeout)
    try:
        return remote.ask(message, timeout)
    finally:
        remote.close()
