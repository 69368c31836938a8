"""A small causal transformer, tensor-parallel over a group of processes, with a KV cache.

Responsible for the numbers only: weights, the tokenizer, prefill and batched decode. It does no
I/O and starts no thread; the collective it needs (an in-place sum over the group) is passed in,
so one process (no torch.distributed at all) and a gloo group run the very same code.

Weights are made in code from a seed (no downloads): every process builds the full model from
the same seed and keeps its shard, so a group of N computes what one process computes, up to
floating-point summation order. Sharding is Megatron-style: each process holds H/N attention
heads (the q/k/v columns of those heads and the matching rows of the output projection) and
d_ff/N MLP columns. Layers are parallel blocks (GPT-J, PaLM): attention and MLP read the same
normalised input, so their row-parallel partial products are summed with one all-reduce per
layer, and their biases are added once, after the sum. Embeddings, layer norms and the output
head are replicated; only the leader computes logits.

Tokenizer: bytes. Token ids 0..255 are the UTF-8 bytes of the prompt, 256 is a beginning-of-text
token put in front of every prompt. Generation samples only printable ASCII and newline, so
every generated token is exactly one character (a stream never splits a character). There is
no end-of-text token: a completion is always max_tokens long.

Thread-safety: none; one thread (the engine loop) owns a model and its cache.
"""

import dataclasses
import math

import torch
import torch.nn.functional as F

BOS = 256
VOCAB = 257
# What generation may produce: newline and printable ASCII, one character per token.
GENERATABLE = [10] + list(range(32, 127))


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 4
    d_model: int = 256
    heads: int = 8
    d_ff: int = 1024
    context: int = 1024  # longest sequence (prompt + BOS + generated tokens)
    seed: int = 0

    def check(self, group_size):
        """Returns an error message naming the setting to change, or None."""
        if self.layers < 1:
            return "--layers must be at least 1"
        if self.heads < 1 or self.d_model % self.heads:
            return f"--d-model ({self.d_model}) must be a positive multiple of --heads ({self.heads})"
        if self.heads % group_size:
            return (f"--heads ({self.heads}) must be a multiple of the group size "
                    f"TESSERA_GROUP_SIZE ({group_size}): each process holds heads/size heads")
        if self.d_ff < 1 or self.d_ff % group_size:
            return (f"--d-ff ({self.d_ff}) must be a positive multiple of the group size "
                    f"TESSERA_GROUP_SIZE ({group_size})")
        if self.context < 2:
            return "--context must be at least 2"
        return None


def encode(text):
    """The token ids of a prompt: BOS, then its UTF-8 bytes."""
    return [BOS] + list(text.encode("utf-8"))


def decode_token(token):
    """The text of one generated token (always a single ASCII character)."""
    return chr(token)


@dataclasses.dataclass
class _Layer:
    ln1_w: torch.Tensor
    ln1_b: torch.Tensor
    qkv: "_Linear"  # to 3 * local heads * head_dim: this shard's q, k and v columns
    out: "_Linear"  # from local heads * head_dim: row-parallel, no bias
    up: "_Linear"  # to d_ff / size: column-parallel
    down: "_Linear"  # from d_ff / size: row-parallel, no bias
    bias: torch.Tensor  # both products' biases, added once after the all-reduce


def _no_reduce(_tensor):
    pass


# Debian's torch links a generic BLAS (about 2 GFLOP/s here); its oneDNN (MKL-DNN) kernels are
# 10-15x faster for the batched products of prefill and batched decode, so the products go
# through oneDNN when torch has it (the same call torch.utils.mkldnn.MkldnnLinear makes).
_ONEDNN = torch.backends.mkldnn.is_available()


def _times_transposed(a, b):
    """a @ b.T for 2-D a (m, k) and b (n, k)."""
    if _ONEDNN:
        return torch._C._nn.mkldnn_linear(a.contiguous().to_mkldnn(), b.contiguous().to_mkldnn(),
                                          None).to_dense()
    return a @ b.t()


class _Linear:
    """x @ weight.T + bias over the last dimension of x, with the weight converted once."""

    def __init__(self, weight, bias=None):
        self.out_features = weight.shape[0]
        if _ONEDNN:
            weight = weight.contiguous().to_mkldnn()
            bias = None if bias is None else bias.contiguous().to_mkldnn()
        self.weight, self.bias = weight, bias

    def __call__(self, x):
        rows = x.reshape(-1, x.shape[-1])
        if _ONEDNN:
            y = torch._C._nn.mkldnn_linear(rows.contiguous().to_mkldnn(), self.weight,
                                           self.bias).to_dense()
        else:
            y = F.linear(rows, self.weight, self.bias)
        return y.view(*x.shape[:-1], self.out_features)


class ShardedTransformer:
    """One process's shard of the model and of the KV cache of max_batch sequence slots.

    all_reduce(tensor) sums tensor in place over the group (identity for a group of one).
    """

    def __init__(self, config, rank=0, size=1, max_batch=8, all_reduce=None):
        error = config.check(size)
        if error:
            raise ValueError(error)
        self.config = config
        self.rank = rank
        self.size = size
        self.max_batch = max_batch
        self._all_reduce = all_reduce or _no_reduce
        self.head_dim = config.d_model // config.heads
        self.local_heads = config.heads // size
        self._build(config)
        shape = (max_batch, self.local_heads, config.context, self.head_dim)
        self.k_cache = [torch.zeros(shape) for _ in range(config.layers)]
        self.v_cache = [torch.zeros(shape) for _ in range(config.layers)]

    def _build(self, c):
        g = torch.Generator().manual_seed(c.seed)

        def normal(*shape, std):
            return torch.randn(*shape, generator=g) * std

        d, hd = c.d_model, self.head_dim
        self.tok_emb = normal(VOCAB, d, std=0.5)
        self.pos_emb = normal(c.context, d, std=0.1)
        # An output head of its own (a tied one makes a random model echo its input), wide
        # enough that logits are well separated: the greedy choice does not hinge on the last
        # bits of a sum, which differ between a group and one process.
        self.lm_head = _Linear(normal(VOCAB, d, std=0.3)[torch.tensor(GENERATABLE)])
        heads = slice(self.rank * self.local_heads * hd, (self.rank + 1) * self.local_heads * hd)
        cols = slice(self.rank * c.d_ff // self.size, (self.rank + 1) * c.d_ff // self.size)
        out_std = 1.0 / math.sqrt(2 * c.layers)
        self.layers = []
        for _ in range(c.layers):
            # Every process draws the full tensors in the same order, then keeps its shard.
            wq, wk, wv = (normal(d, d, std=d**-0.5) for _ in range(3))
            bq, bk, bv = (normal(d, std=0.02) for _ in range(3))
            wo = normal(d, d, std=d**-0.5 * out_std)
            bo = normal(d, std=0.02)
            w1 = normal(c.d_ff, d, std=d**-0.5)
            b1 = normal(c.d_ff, std=0.02)
            w2 = normal(d, c.d_ff, std=c.d_ff**-0.5 * out_std)
            b2 = normal(d, std=0.02)
            self.layers.append(_Layer(
                ln1_w=torch.ones(d), ln1_b=torch.zeros(d),
                qkv=_Linear(torch.cat([wq[heads], wk[heads], wv[heads]]),
                            torch.cat([bq[heads], bk[heads], bv[heads]])),
                out=_Linear(wo[:, heads]),
                up=_Linear(w1[cols], b1[cols]), down=_Linear(w2[:, cols]), bias=bo + b2))
        self.lnf_w, self.lnf_b = torch.ones(d), torch.zeros(d)

    @torch.no_grad()
    def prefill(self, slot, tokens, want_logits=True):
        """Runs a whole prompt into cache slot `slot` from position 0.

        Returns the logits over GENERATABLE for the next token (a 1-D tensor), or None when
        want_logits is false (followers do not need them)."""
        n_tok = len(tokens)
        ids = torch.tensor(tokens)
        x = (self.tok_emb[ids] + self.pos_emb[:n_tok]).unsqueeze(0)  # (1, T, d)
        causal = torch.full((n_tok, n_tok), float("-inf")).triu(1)

        def attend(index, q, k, v):  # (1, heads, T, head_dim) each
            self.k_cache[index][slot, :, :n_tok] = k[0]
            self.v_cache[index][slot, :, :n_tok] = v[0]
            heads = []
            for h in range(self.local_heads):
                scores = _times_transposed(q[0, h], k[0, h]) / math.sqrt(self.head_dim) + causal
                heads.append(_times_transposed(torch.softmax(scores, dim=-1), v[0, h].t()))
            return torch.stack(heads).unsqueeze(0)

        h = self._blocks(x, attend)
        return self._logits(h[0, -1]) if want_logits else None

    @torch.no_grad()
    def decode(self, tokens, positions, want_logits=True):
        """One decode step for slots 0..n-1 at once (n = len(tokens)): slot i takes token
        tokens[i] at position positions[i], attending to its cached positions 0..positions[i].

        A free slot in that range may be given any token at position 0 (its cache is rewritten
        by the next prefill). Returns logits over GENERATABLE, one row per slot, or None."""
        n = len(tokens)
        ids = torch.tensor(tokens)
        pos = torch.tensor(positions)
        rows = torch.arange(n)
        length = int(pos.max()) + 1
        # Key position j is visible to slot i when j <= positions[i].
        hidden = torch.arange(length).unsqueeze(0) > pos.unsqueeze(1)  # (n, length)
        mask = torch.zeros(n, length).masked_fill(hidden, float("-inf"))[:, None, None, :]
        x = (self.tok_emb[ids] + self.pos_emb[pos]).unsqueeze(1)  # (n, 1, d)

        def attend(index, q, k, v):  # (n, heads, 1, head_dim) each
            k_cache, v_cache = self.k_cache[index], self.v_cache[index]
            k_cache[rows, :, pos] = k[:, :, 0]
            v_cache[rows, :, pos] = v[:, :, 0]
            keys, values = k_cache[:n, :, :length], v_cache[:n, :, :length]
            scores = q @ keys.transpose(-1, -2) / math.sqrt(self.head_dim) + mask
            return torch.softmax(scores, dim=-1) @ values

        h = self._blocks(x, attend)
        return self._logits(h[:, 0]) if want_logits else None

    def _blocks(self, x, attend):
        d, heads, hd = self.config.d_model, self.local_heads, self.head_dim
        batch, steps = x.shape[0], x.shape[1]
        for index, layer in enumerate(self.layers):
            h = F.layer_norm(x, (d,), layer.ln1_w, layer.ln1_b)
            qkv = layer.qkv(h).view(batch, steps, 3, heads, hd)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (batch, heads, T, hd)
            a = attend(index, q, k, v).transpose(1, 2).reshape(batch, steps, heads * hd)
            # Parallel block: attention and MLP read the same normalised input and their
            # row-parallel partial sums are reduced together, one all-reduce per layer.
            partial = layer.out(a) + layer.down(F.gelu(layer.up(h)))
            self._all_reduce(partial)
            x = x + partial + layer.bias
        return x

    def _logits(self, h):
        h = F.layer_norm(h, (self.config.d_model,), self.lnf_w, self.lnf_b)
        return self.lm_head(h)

    def export_kv(self, slot, length):
        """Copies of the cached keys and values of positions 0..length-1 of `slot`: one (k, v)
        pair per layer, each (local_heads, length, head_dim). The KV handoff of disaggregated
        serving (kvwire.py) sends these."""
        return [(k[slot, :, :length].clone(), v[slot, :, :length].clone())
                for k, v in zip(self.k_cache, self.v_cache)]

    def import_kv(self, slot, layers):
        """Writes exported keys and values into `slot` from position 0, as prefill() would
        have: decoding then continues at position `length` with the same numbers."""
        if len(layers) != len(self.k_cache):
            raise ValueError(f"{len(layers)} layers of KV for a model of {len(self.k_cache)}")
        for index, (k, v) in enumerate(layers):
            length = k.shape[1]
            if length > self.config.context:
                raise ValueError(f"{length} cached positions exceed the context "
                                 f"({self.config.context})")
            self.k_cache[index][slot, :, :length] = k
            self.v_cache[index][slot, :, :length] = v

    def token_of(self, index):
        """The token id of column `index` of the logits."""
        return GENERATABLE[index]
