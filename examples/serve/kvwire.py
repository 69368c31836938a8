"""The KV-cache wire format of prefill/decode disaggregation (docs/serving.md, "KV handoff").

A prefill replica runs a prompt, keeps the result as one blob under a handle, and a decode
replica pulls the blob over TCP and imports it into a cache slot of its own. The blob holds
everything decode needs to carry on exactly as if it had prefilled the prompt itself: the
prompt's token ids, every layer's keys and values for those positions, and the logits of the
next token (decode samples the first token itself, with the request's own generator, so a
seeded request gives the same text either way).

Layout, little-endian, no padding:

  header  struct "<4sHHIIIIIqIIHH" (52 bytes)
          magic b"TKV1", version 2, dtype 1 (float32), layers, heads (the model's), head_dim,
          d_model, context, weight seed (int64), tokens T (the cached positions, BOS
          included), logits L (columns of the next-token logits; 0 on a follower's shard),
          rank R and group size G (uint16 each: the shard of a tensor-parallel group)
  tokens  T x uint32: the prompt's token ids
  layers  for each layer: keys then values, each heads/G x T x head_dim float32 (C order):
          the heads of rank R (model.py gives rank R heads R*heads/G .. (R+1)*heads/G - 1)
  logits  L x float32
  crc32   uint32: zlib.crc32 of every byte before it

The header alone gives the blob's length (blob_length), so a reader knows how much to read.
A decode process imports a blob only when the model fields (layers .. seed) and the shard
(rank, group size) equal its own and the tokens equal its request's prompt; decode() raises
WireError naming what differs. Version 1 (48 bytes, no shard fields, groups of one) is refused
with an error saying both roles must run the same server.

Pure: struct, zlib and torch tensors; no I/O.
"""

import struct
import zlib

import torch

MAGIC = b"TKV1"
VERSION = 2
DTYPE_FLOAT32 = 1
HEADER = struct.Struct("<4sHHIIIIIqIIHH")
CRC = struct.Struct("<I")
MODEL_FIELDS = ("layers", "heads", "head_dim", "d_model", "context", "seed")
SHARD_FIELDS = ("rank", "group_size")


class WireError(Exception):
    """A blob that cannot be imported: damaged, truncated, or from another model."""


def model_fields(model):
    """The header fields that must match between the exporting and the importing process: the
    model's, and which shard of a tensor-parallel group this process holds."""
    c = model.config
    return {"layers": c.layers, "heads": c.heads, "head_dim": model.head_dim,
            "d_model": c.d_model, "context": c.context, "seed": c.seed, "rank": model.rank,
            "group_size": model.size}


def blob_length(header_bytes):
    """The whole blob's length in bytes, from its first HEADER.size bytes."""
    fields = _header(header_bytes)
    t = fields["tokens"]
    per_layer = fields["heads"] // fields["group_size"] * t * fields["head_dim"]
    return HEADER.size + 4 * t + 2 * 4 * per_layer * fields["layers"] + 4 * fields[
        "logits"] + CRC.size


def encode(fields, tokens, layers, logits):
    """fields: model_fields(model); tokens: the prompt ids; layers: [(k, v)] with k and v of
    shape (heads / group_size, T, head_dim), this rank's shard; logits: a 1-D tensor (empty
    on a follower, which computes none). Returns the blob (bytes)."""
    t = len(tokens)
    for index, (k, v) in enumerate(layers):
        want = (fields["heads"] // fields["group_size"], t, fields["head_dim"])
        if tuple(k.shape) != want or tuple(v.shape) != want:
            raise ValueError(f"layer {index}: keys {tuple(k.shape)} and values "
                             f"{tuple(v.shape)} must both be {want}")
    if len(layers) != fields["layers"]:
        raise ValueError(f"{len(layers)} layers given, the header says {fields['layers']}")
    parts = [HEADER.pack(MAGIC, VERSION, DTYPE_FLOAT32, fields["layers"], fields["heads"],
                         fields["head_dim"], fields["d_model"], fields["context"],
                         fields["seed"], t, logits.numel(), fields["rank"],
                         fields["group_size"]),
             struct.pack(f"<{t}I", *tokens)]
    for k, v in layers:
        parts.append(_float_bytes(k))
        parts.append(_float_bytes(v))
    parts.append(_float_bytes(logits))
    body = b"".join(parts)
    return body + CRC.pack(zlib.crc32(body))


def decode(blob, expect_fields=None, expect_tokens=None):
    """Checks and unpacks a blob: (tokens, [(k, v)], logits). Raises WireError."""
    if len(blob) < HEADER.size + CRC.size:
        raise WireError(f"the blob is {len(blob)} bytes, shorter than a header")
    fields = _header(blob[:HEADER.size])
    want = blob_length(blob[:HEADER.size])
    if len(blob) != want:
        raise WireError(f"the blob is {len(blob)} bytes; its header says {want}")
    (crc,) = CRC.unpack_from(blob, len(blob) - CRC.size)
    actual = zlib.crc32(memoryview(blob)[:len(blob) - CRC.size])
    if crc != actual:
        raise WireError(f"checksum mismatch: the blob says crc32 {crc:#010x}, its bytes give "
                        f"{actual:#010x} (damaged in transfer)")
    if expect_fields is not None:
        for name in MODEL_FIELDS:
            if fields[name] != expect_fields[name]:
                raise WireError(f"the prefill replica's model differs: {name} "
                                f"{fields[name]} there, {expect_fields[name]} here (both "
                                "roles must run the same model flags and --seed)")
        if any(fields[name] != expect_fields[name] for name in SHARD_FIELDS):
            raise WireError(f"the KV shard is rank {fields['rank']} of a group of "
                            f"{fields['group_size']}; this process is rank "
                            f"{expect_fields['rank']} of {expect_fields['group_size']} (rank r "
                            "pulls rank r's shard from a prefill group of its own size)")
    t, hd = fields["tokens"], fields["head_dim"]
    heads = fields["heads"] // fields["group_size"]
    offset = HEADER.size
    tokens = list(struct.unpack_from(f"<{t}I", blob, offset))
    offset += 4 * t
    if expect_tokens is not None and tokens != list(expect_tokens):
        raise WireError(f"the blob caches another prompt ({t} tokens; this request has "
                        f"{len(expect_tokens)})")
    per = heads * t * hd
    layers = []
    for _ in range(fields["layers"]):
        k = _floats(blob, offset, per).view(heads, t, hd)
        offset += 4 * per
        v = _floats(blob, offset, per).view(heads, t, hd)
        offset += 4 * per
        layers.append((k, v))
    logits = _floats(blob, offset, fields["logits"])
    return tokens, layers, logits


def _header(header_bytes):
    if len(header_bytes) < HEADER.size:
        raise WireError(f"a header is {HEADER.size} bytes, got {len(header_bytes)}")
    magic, version = struct.unpack_from("<4sH", header_bytes)
    if magic != MAGIC:
        raise WireError(f"not a KV blob: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise WireError(f"KV wire version {version}; this server reads version {VERSION} "
                        "(run the same examples/serve/server.py on the prefill and decode "
                        "roles)")
    (_, _, dtype, layers, heads, head_dim, d_model, context, seed, tokens, logits, rank,
     group_size) = HEADER.unpack_from(header_bytes)
    if dtype != DTYPE_FLOAT32:
        raise WireError(f"KV dtype code {dtype}; this server reads 1 (float32)")
    if group_size < 1 or rank >= group_size or heads % group_size:
        raise WireError(f"a KV shard header says rank {rank} of a group of {group_size} with "
                        f"{heads} heads: the rank must be below the group size, which must "
                        "divide the heads")
    return {"layers": layers, "heads": heads, "head_dim": head_dim, "d_model": d_model,
            "context": context, "seed": seed, "tokens": tokens, "logits": logits,
            "rank": rank, "group_size": group_size}


def _float_bytes(tensor):
    return tensor.detach().to(torch.float32).contiguous().numpy().tobytes()


def _floats(blob, offset, count):
    if count == 0:
        return torch.zeros(0)
    return torch.frombuffer(bytearray(blob[offset:offset + 4 * count]), dtype=torch.float32)
