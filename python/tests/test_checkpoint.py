import os
import random
import tempfile
import unittest

from tessera import checkpoint


def write_file(path, content):
    with open(path, "wb") as f:
        f.write(content)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self._tmp.name, "ckpt")  # save() must create it

    def tearDown(self):
        self._tmp.cleanup()

    def test_save_then_latest_then_load(self):
        self.assertIsNone(checkpoint.latest(self.dir))
        saved = checkpoint.save(self.dir, 10, b"ten")
        self.assertEqual(saved.path, os.path.join(self.dir, "ckpt-0000000010"))
        self.assertGreaterEqual(saved.seconds, 0.0)
        path, seconds = checkpoint.save(self.dir, 20, lambda: bytearray(b"twenty"))
        self.assertEqual(checkpoint.latest(self.dir), (20, path))
        self.assertEqual(checkpoint.load(path), b"twenty")
        self.assertEqual(checkpoint.load(saved.path), b"ten")
        self.assertEqual(sorted(os.listdir(self.dir)), ["ckpt-0000000010", "ckpt-0000000020"])

    def test_empty_payload_and_overwrite_same_step(self):
        checkpoint.save(self.dir, 0, b"")
        self.assertEqual(checkpoint.load(checkpoint.latest(self.dir)[1]), b"")
        checkpoint.save(self.dir, 0, b"again")
        self.assertEqual(checkpoint.load(checkpoint.latest(self.dir)[1]), b"again")

    def test_latest_skips_temporaries_and_damaged_files(self):
        checkpoint.save(self.dir, 1, b"one")
        good = checkpoint.save(self.dir, 2, b"two" * 100).path
        # A crashed save leaves a temporary; a stray file has a similar name.
        write_file(os.path.join(self.dir, ".tmp-ckpt-0000000009-x"), b"partial")
        write_file(os.path.join(self.dir, "ckpt-0000000008.bak"), b"junk")
        # Truncated, corrupted, trailing data, foreign, header/name mismatch: all newer.
        data = read_file(good)
        damaged = {
            3: data[:-1],
            4: data[:10],
            5: data[:-1] + bytes([data[-1] ^ 1]),
            6: data + b"x",
            7: b"not a checkpoint at all, just some bytes",
        }
        for step, content in damaged.items():
            write_file(os.path.join(self.dir, f"ckpt-{step:010d}"), content)
        os.link(good, os.path.join(self.dir, "ckpt-0000000011"))  # header says step 2
        self.assertEqual(checkpoint.latest(self.dir), (2, good))
        for step in (3, 4, 5, 6, 7, 11):
            with self.assertRaises(checkpoint.CorruptCheckpoint):
                checkpoint.load(os.path.join(self.dir, f"ckpt-{step:010d}"))

    def test_every_truncation_is_detected(self):
        path = checkpoint.save(self.dir, 3, bytes(range(256)) * 4).path
        data = read_file(path)
        for cut in range(len(data)):
            write_file(path, data[:cut])
            with self.assertRaises(checkpoint.CorruptCheckpoint, msg=f"cut at {cut}"):
                checkpoint.load(path)
            self.assertIsNone(checkpoint.latest(self.dir))

    def test_keep_last_prunes_older_ones(self):
        for step in range(0, 60, 10):
            checkpoint.save(self.dir, step, str(step).encode(), keep_last=2)
        self.assertEqual(sorted(os.listdir(self.dir)), ["ckpt-0000000040", "ckpt-0000000050"])
        # A damaged newest file does not count toward the kept ones.
        write_file(os.path.join(self.dir, "ckpt-0000000060"), b"torn")
        checkpoint.save(self.dir, 55, b"55", keep_last=2)
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["ckpt-0000000050", "ckpt-0000000055", "ckpt-0000000060"])
        self.assertEqual(checkpoint.latest(self.dir)[0], 55)

    def test_bad_arguments(self):
        for step in (-1, 1.5, True, 10**10):
            with self.assertRaises(ValueError, msg=repr(step)):
                checkpoint.save(self.dir, step, b"")
        with self.assertRaises(TypeError):
            checkpoint.save(self.dir, 1, "text is not bytes")
        with self.assertRaises(ValueError):
            checkpoint.save(self.dir, 1, b"", keep_last=0)
        self.assertIsNone(checkpoint.latest(self.dir))

    def test_failed_serialization_leaves_nothing(self):
        def boom():
            raise RuntimeError("serializer failed")

        with self.assertRaises(RuntimeError):
            checkpoint.save(self.dir, 1, boom)
        self.assertEqual(os.listdir(self.dir) if os.path.isdir(self.dir) else [], [])

    def test_random_payloads_round_trip(self):
        seed = random.randrange(1 << 30)
        rng = random.Random(seed)
        for i in range(20):
            payload = rng.randbytes(rng.randrange(0, 5000))
            path = checkpoint.save(self.dir, i, payload, keep_last=3).path
            self.assertEqual(checkpoint.load(path), payload, f"seed={seed}")
        self.assertEqual(len(os.listdir(self.dir)), 3, f"seed={seed}")

    def test_torch_is_not_imported_by_the_sdk(self):
        import subprocess
        import sys

        code = ("import sys, tessera.checkpoint, tessera.data, tessera.worker; "
                "print('torch' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": os.path.dirname(
                                 os.path.dirname(os.path.abspath(checkpoint.__file__)))},
                             check=True).stdout
        self.assertEqual(out.strip(), "False")


if __name__ == "__main__":
    unittest.main()
