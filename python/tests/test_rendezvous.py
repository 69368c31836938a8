"""tessera.rendezvous.wait_for_master: non-zero ranks wait for rank 0's store to listen."""

import socket
import threading
import time
import unittest

from tessera import rendezvous, worker


def ctx(rank, port, world=4):
    return worker.WorkerContext(rank=rank, world_size=world, master_addr="127.0.0.1",
                                master_port=port)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WaitForMasterTest(unittest.TestCase):
    def test_returns_once_the_port_listens(self):
        port = free_port()
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.addCleanup(server.close)
        about_to_listen = threading.Event()

        def listen_later():
            time.sleep(0.2)  # the store comes up after this rank started waiting
            server.bind(("127.0.0.1", port))
            about_to_listen.set()  # before listen(): the waiter may return the moment it listens
            server.listen(8)

        threading.Thread(target=listen_later, daemon=True).start()
        self.assertTrue(rendezvous.wait_for_master(ctx(1, port), timeout_s=30, poll_s=0.005))
        self.assertTrue(about_to_listen.is_set(), "returned before the store listened")

    def test_rank_0_and_a_world_of_one_do_not_wait(self):
        port = free_port()  # nothing listens
        start = time.monotonic()
        self.assertFalse(rendezvous.wait_for_master(ctx(0, port), timeout_s=30))
        self.assertFalse(rendezvous.wait_for_master(ctx(0, port, world=1), timeout_s=30))
        self.assertLess(time.monotonic() - start, 5)

    def test_gives_up_at_the_timeout(self):
        port = free_port()
        self.assertFalse(rendezvous.wait_for_master(ctx(2, port), timeout_s=0.1, poll_s=0.01))


if __name__ == "__main__":
    unittest.main()
