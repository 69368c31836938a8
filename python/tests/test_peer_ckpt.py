"""tessera.peer_ckpt: the keeper's bookkeeping (cap, fencing, retention, checksums), the ring,
and real keepers (detached processes, as workers start them) serving two "hosts" of this
machine: restore from the freshest complete copy, from a peer once a host's keeper is gone,
torn copies refused, stale copies never chosen, the cap's error raised by save()."""

import os
import shutil
import signal
import tempfile
import time
import unittest
import zlib

from tessera import checkpoint, peer_ckpt
from tessera.peer_ckpt import Found, KeeperMemory, PeerCheckpointError, Snapshot


def snap(rank=0, uid=1, attempt=0, step=1, payload=b"x" * 10, world=2, crc=None):
    return Snapshot(rank=rank, uid=uid, attempt=attempt, step=step, world=world,
                    crc32=zlib.crc32(payload) if crc is None else crc, payload=payload)


class KeeperMemoryTest(unittest.TestCase):
    def test_keeps_the_newest_two_per_rank(self):
        m = KeeperMemory(1000, "h")
        for step in (1, 2, 3):
            m.put(snap(step=step))
        self.assertEqual(sorted(s["step"] for s in m.index()), [2, 3])
        self.assertEqual(m.used, 20)
        self.assertIsNone(m.get(0, 1, 0, 1))
        self.assertEqual(m.get(0, 1, 0, 3).payload, b"x" * 10)

    def test_over_the_cap_is_an_error_naming_the_setting_and_nothing_is_dropped(self):
        m = KeeperMemory(25, "h")
        m.put(snap(rank=0, step=1))
        m.put(snap(rank=1, step=1))
        with self.assertRaises(PeerCheckpointError) as e:
            m.put(snap(rank=0, step=2))  # would hold 30 bytes: 2 of rank 0 and 1 of rank 1
        self.assertEqual(e.exception.code, "over_cap")
        self.assertIn("maxBytesPerHost", str(e.exception))
        self.assertIn("25", str(e.exception))
        # What it held stays as it was.
        self.assertEqual(sorted((s["rank"], s["step"]) for s in m.index()), [(0, 1), (1, 1)])

    def test_a_torn_snapshot_is_refused(self):
        m = KeeperMemory(1000, "h")
        with self.assertRaises(PeerCheckpointError) as e:
            m.put(snap(crc=123))
        self.assertEqual(e.exception.code, "torn")
        self.assertEqual(m.index(), [])

    def test_an_older_attempt_is_fenced_off(self):
        m = KeeperMemory(1000, "h")
        m.put(snap(attempt=0, step=30))
        m.begin(1, 1)
        with self.assertRaises(PeerCheckpointError) as e:
            m.put(snap(attempt=0, step=31))
        self.assertEqual(e.exception.code, "stale_attempt")
        # A newer attempt's lower step replaces the older attempt's history.
        m.put(snap(attempt=1, step=21))
        self.assertEqual(m.get(0, 1, 1, 21).step, 21)
        with self.assertRaises(PeerCheckpointError) as e:
            m.put(snap(attempt=1, step=20))
        self.assertEqual(e.exception.code, "stale_step")
        # A job uid created later is newer than every attempt of the one before.
        m.put(snap(uid=2, attempt=0, step=1))
        with self.assertRaises(PeerCheckpointError):
            m.begin(1, 5)


class RingTest(unittest.TestCase):
    def test_the_peer_is_on_the_next_slice_when_there_is_one(self):
        self.assertEqual(peer_ckpt.ring_peers(1, 8, 2, 1), [5])
        self.assertEqual(peer_ckpt.ring_peers(5, 8, 2, 1), [1])
        self.assertEqual(peer_ckpt.ring_peers(2, 12, 3, 2), [6, 10])

    def test_one_slice_uses_the_next_host(self):
        self.assertEqual(peer_ckpt.ring_peers(3, 4, 1, 1), [0])
        self.assertEqual(peer_ckpt.ring_peers(0, 4, 1, 2), [1, 2])
        self.assertEqual(peer_ckpt.ring_peers(0, 1, 1, 1), [])
        self.assertEqual(peer_ckpt.ring_peers(0, 4, 1, 0), [])


class ConfigTest(unittest.TestCase):
    def test_reads_the_variables_and_names_a_bad_one(self):
        cfg = peer_ckpt.config_from_env({peer_ckpt.EVERY_VAR: "1", peer_ckpt.COPIES_VAR: "2",
                                         peer_ckpt.MAX_BYTES_VAR: "1000"})
        self.assertEqual((cfg.every_steps, cfg.peer_copies, cfg.max_bytes_per_host), (1, 2, 1000))
        self.assertFalse(peer_ckpt.config_from_env({}).enabled)
        with self.assertRaises(PeerCheckpointError) as e:
            peer_ckpt.config_from_env({peer_ckpt.MAX_BYTES_VAR: "lots"})
        self.assertIn(peer_ckpt.MAX_BYTES_VAR, str(e.exception))


def state_of(rank, step):
    return f"rank {rank} step {step} ".encode() * 50


class LiveKeepersTest(unittest.TestCase):
    """Two hosts (A: slice 0, B: slice 1), one rank each, world 2: rank 0's peer copy is on B
    and rank 1's on A."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="peer-ckpt-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.addCleanup(self.kill_keepers)
        self.open_ranks = []

    def kill_keepers(self):
        for pc in self.open_ranks:
            try:
                pc.close(finished=True, timeout_s=5)
            except Exception:
                pass
        for host in ("A", "B"):
            pid = self.keeper_pid(host)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def keeper_pid(self, host):
        doc = peer_ckpt._read_json(os.path.join(self.dir, peer_ckpt.SUBDIR, "keepers", host))
        return doc and doc["pid"]

    def ranks(self, attempt, max_bytes=1 << 20, every=1, world=2):
        cfg = peer_ckpt.Config(every_steps=every, peer_copies=1, max_bytes_per_host=max_bytes,
                               idle_s=120)
        out = []
        for rank in range(world):
            pc = peer_ckpt.PeerCheckpoints(cfg, rank=rank, world=world, num_slices=world,
                                           slice_id=rank, attempt=attempt, uid=7,
                                           directory=self.dir, host="AB"[rank])
            out.append(pc)
            self.open_ranks.append(pc)
        return out

    def train(self, ranks, steps):
        for step in steps:
            for pc in ranks:
                self.assertTrue(pc.save(step, state_of(pc.rank, step)))
                pc.flush()

    def test_restore_from_memory_then_from_the_peer_then_from_disk(self):
        a0 = self.ranks(0)
        self.train(a0, range(1, 6))
        checkpoint.save(self.dir, 3, b"disk state of step 3", attempt=0)
        for pc in a0:
            pc.close()
        self.assertEqual(a0[0].stats["coalesced"], 0)

        a1 = self.ranks(1)
        found = a1[0].latest()
        self.assertEqual(found, Found(5, "memory", attempt=0, world=2))
        for pc in a1:
            self.assertEqual(pc.load(found), state_of(pc.rank, 5))

        # Host B is lost, keeper and all: rank 1's copy on A stands in.
        os.kill(self.keeper_pid("B"), signal.SIGKILL)
        a2 = self.ranks(2)
        found = a2[0].latest()
        self.assertEqual((found.step, found.source), (5, "memory"))
        self.assertEqual(a2[1].load(found), state_of(1, 5))

        # Both keepers gone: the disk checkpoint.
        os.kill(self.keeper_pid("A"), signal.SIGKILL)
        a3 = self.ranks(3)
        found = a3[0].latest()
        self.assertEqual((found.step, found.source), (3, "disk"))
        self.assertEqual(a3[1].load(found), b"disk state of step 3")

    def test_restore_order_is_this_host_then_the_ring_then_the_rest(self):
        a0 = self.ranks(0)
        self.train(a0, [1])
        self.assertEqual([h for h, _ in a0[1]._keepers()], ["B", "A"])
        self.assertEqual([h for h, _ in a0[0]._keepers()], ["A", "B"])

    def test_a_torn_copy_is_never_loaded(self):
        a0 = self.ranks(0)
        self.train(a0, [1, 2])
        # A put whose payload does not match its checksum is refused by the keeper.
        conn = a0[0]._conns["A"]
        bad = state_of(0, 3)
        with self.assertRaises(PeerCheckpointError) as e:
            conn.request({"op": "put", "rank": 0, "uid": 7, "attempt": 0, "step": 3,
                          "world": 2, "crc32": zlib.crc32(bad) ^ 1, "length": len(bad)},
                         memoryview(bad))
        self.assertEqual(e.exception.code, "torn")
        # A copy damaged on its way back is skipped for the next keeper's.
        a1 = self.ranks(1)
        found = a1[0].latest()
        self.assertEqual(found.step, 2)
        pc = a1[0]
        real = peer_ckpt._Conn.request
        calls = []

        def damaging(self_conn, header, payload=None):
            reply, data = real(self_conn, header, payload)
            if header["op"] == "get" and not calls:
                calls.append(1)
                data = data[:-1] + bytes([data[-1] ^ 0xFF])
            return reply, data

        peer_ckpt._Conn.request = damaging
        try:
            self.assertEqual(pc.load(found), state_of(0, 2))
        finally:
            peer_ckpt._Conn.request = real
        self.assertEqual(pc.stats["torn_refused"], 1)

    def test_stale_copies_are_never_chosen(self):
        a0 = self.ranks(0)
        self.train(a0, range(1, 9))
        # Not newer than disk: the disk checkpoint.
        checkpoint.save(self.dir, 8, b"disk 8", attempt=0)
        a1 = self.ranks(1)
        self.assertEqual(a1[0].latest(record=False).source, "disk")
        os.unlink(os.path.join(self.dir, checkpoint.checkpoint_name(8)))
        # Attempt 1 resumed from step 2 (say the keepers did not answer then) and died before
        # any snapshot: attempt 0's steps 7-8 are another history now and never come back.
        a1[0].record_resume(2, "disk")
        a2 = self.ranks(2)
        self.assertIsNone(a2[0].latest())

    def test_a_snapshot_over_the_cap_raises_on_the_next_save(self):
        a0 = self.ranks(0, max_bytes=1500)  # one rank's two snapshots fit, not a peer's too
        with self.assertRaises(PeerCheckpointError) as e:
            self.train(a0, range(1, 4))
        self.assertEqual(e.exception.code, "over_cap")
        self.assertIn("maxBytesPerHost", str(e.exception))

    def test_a_leftover_of_an_older_attempt_cannot_overwrite_a_newer_one(self):
        a0 = self.ranks(0)
        self.train(a0, [1])
        a1 = self.ranks(1)
        self.train(a1, [1])  # attempt 1 has started on both keepers
        with self.assertRaises(PeerCheckpointError) as e:
            self.train(a0, [2])
        self.assertEqual(e.exception.code, "stale_attempt")

    def test_saves_only_when_due_and_coalesces_instead_of_blocking(self):
        a0 = self.ranks(0, every=3)
        self.assertFalse(a0[0].save(1, b"a"))
        self.assertTrue(a0[0].save(3, b"b"))
        a0[0].flush()
        self.assertEqual(a0[0].stats["saved"], 1)

    def test_disabled_is_disk_only(self):
        pc = peer_ckpt.PeerCheckpoints(peer_ckpt.Config(), rank=0, world=1, num_slices=1,
                                       slice_id=0, attempt=None, uid=0, directory=self.dir,
                                       host="A")
        self.assertFalse(pc.save(1, b"x"))
        self.assertIsNone(pc.latest())
        checkpoint.save(self.dir, 4, b"four")
        found = pc.latest()
        self.assertEqual((found.step, found.source), (4, "disk"))
        self.assertEqual(pc.load(found), b"four")
        self.assertFalse(os.path.exists(os.path.join(self.dir, peer_ckpt.SUBDIR)))


if __name__ == "__main__":
    unittest.main()
