"""What integer attention costs, on a trained model: KL divergence of next-token distributions
against exact float64 attention, for int8/int4 KV with keys scored from their decoded values (f32
path) and with integer scores against an int8 query, and for int8 values summed from their decoded
rows or in integers with quantized weights (attention_int.h).

kvlm scores int8/int4 keys in integers only for groups of 4+ query heads per KV head; the one
trained model here (stories260K) has groups of 2. So the study runs it twice: as it is (the query
quantized hypothetically), and with its KV heads mean-pooled in pairs into groups of 4 (the GQA
paper's conversion; the model is degraded, but its activations are a trained model's).

An independent numpy forward of the llama2.c checkpoint in float64, checked against the llama2.c
perplexity golden before anything is measured. The codecs mirror kv_quant.cpp (int8: a scale per
row and head, amax/127; int4: groups of 32 with scale and minimum) and QuantQuery::prepare (a
scale per head, amax/127, round to nearest even), in float32 where kvlm uses float32.

Usage: .venv/bin/python bench/query_quant_kld.py [--windows 8] [--shared ../shared]
"""
import argparse
import json
import os
import struct

import numpy as np


def load_llama2c(path):
    raw = open(path, "rb").read()
    dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    w = np.frombuffer(raw, dtype=np.float32, offset=28).astype(np.float64)
    hd = dim // heads
    at = 0

    def take(*shape):
        nonlocal at
        n = int(np.prod(shape))
        out = w[at:at + n].reshape(shape)
        at += n
        return out

    m = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab, seq=seq, hd=hd)
    m["emb"] = take(vocab, dim)
    m["rms_att"] = take(layers, dim)
    m["wq"] = take(layers, dim, dim)
    m["wk"] = take(layers, kv_heads * hd, dim)
    m["wv"] = take(layers, kv_heads * hd, dim)
    m["wo"] = take(layers, dim, dim)
    m["rms_ffn"] = take(layers, dim)
    m["w1"] = take(layers, hidden, dim)
    m["w2"] = take(layers, dim, hidden)
    m["w3"] = take(layers, hidden, dim)
    m["rms_final"] = take(dim)
    take(seq, hd // 2)  # llama2.c's stored rope tables (recomputed below)
    take(seq, hd // 2)
    m["cls"] = m["emb"] if shared else take(vocab, dim)
    return m


def pool_kv_heads(m):
    """Mean-pools adjacent KV heads in pairs: groups of 2 query heads per KV head become 4."""
    p = dict(m)
    hd, kvh = m["hd"], m["kv_heads"]
    for name in ("wk", "wv"):
        w = m[name].reshape(m["layers"], kvh // 2, 2, hd, m["dim"])
        p[name] = w.mean(axis=2).reshape(m["layers"], (kvh // 2) * hd, m["dim"])
    p["kv_heads"] = kvh // 2
    return p


def rmsnorm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w


def rope(x, hd):
    """llama2.c's rotation of adjacent pairs, theta 10000; x is [T, heads, hd]."""
    t = np.arange(x.shape[0])[:, None]
    freq = 1.0 / 10000.0 ** (np.arange(0, hd, 2) / hd)
    ang = t * freq[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


# ---- the codecs, as kv_quant.cpp and QuantQuery::prepare compute them (float32) ----
def int8_rows(x):
    """x [T, heads, hd] -> (codes, scale [T, heads, 1], decoded float64): a scale per row and head."""
    x = x.astype(np.float32)
    amax = np.abs(x).max(axis=-1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    codes = np.rint(x * inv).astype(np.int64)
    return codes, d, (codes.astype(np.float32) * d).astype(np.float64)


def int4_rows(x):
    """Groups of 32 along hd: (codes [T, kvh, G, 32], scale, minimum [T, kvh, G, 1], decoded)."""
    T, kvh, hd = x.shape
    g = x.astype(np.float32).reshape(T, kvh, hd // 32, 32)
    lo, hi = g.min(axis=-1, keepdims=True), g.max(axis=-1, keepdims=True)
    s = ((hi - lo) / np.float32(15)).astype(np.float32)
    inv = np.where(s != 0, np.float32(1) / np.where(s != 0, s, 1), 0).astype(np.float32)
    codes = np.clip(np.rint((g - lo) * inv), 0, 15).astype(np.int64)
    dec = (s * codes.astype(np.float32) + lo).astype(np.float32)  # one fused multiply-add in kvlm
    return codes, s, lo, dec.reshape(T, kvh, hd).astype(np.float64)


def int4_kv_rows(x):
    """kvlm's int4 codec as it lies in the cache: groups of 32 along the whole KV row (all heads),
    whatever the head size. x [T, kvh, hd] -> (nibbles, scale, zero [T, groups, 1], decoded [T, kvh, hd])."""
    T, kvh, hd = x.shape
    g = x.astype(np.float32).reshape(T, kvh * hd // 32, 32)
    lo, hi = g.min(axis=-1, keepdims=True), g.max(axis=-1, keepdims=True)
    s = ((hi - lo) / np.float32(15)).astype(np.float32)
    inv = np.where(s != 0, np.float32(1) / np.where(s != 0, s, 1), 0).astype(np.float32)
    codes = np.clip(np.rint((g - lo) * inv), 0, 15).astype(np.int64)
    dec = (s * codes.astype(np.float32) + lo).astype(np.float32)
    return codes, s, lo, dec.reshape(T, kvh, hd).astype(np.float64)


def int4_value_sums(p, v, group):
    """int_value_sums for int4 rows (int4_kv_rows): per head, block of 32 keys and group, the
    weights p * scale quantized to 0..127 against the nibbles, and the zero points' share sum p * z
    exact. p [h, T, S], v [S, kvh, hd]. Returns [T, heads, hd]."""
    S, kvh, hd = v.shape
    codes, sc, zp, _ = int4_kv_rows(v)
    nib = codes.reshape(S, kvh, hd)
    gid = (np.arange(kvh * hd) // 32).reshape(kvh, hd)  # each element's group
    out = np.zeros((p.shape[1], p.shape[0], hd))
    for h in range(p.shape[0]):
        kh = h // group
        for gr in np.unique(gid[kh]):
            d = np.nonzero(gid[kh] == gr)[0]
            ph = p[h][:, :, None]  # [T, S, 1]
            part = int_value_sums(ph.transpose(2, 0, 1), nib[:, kh:kh + 1, d], sc[:, gr:gr + 1, :], 1)  # [T, 1, len(d)]
            out[:, h, d] = part[:, 0, :] + (p[h] * zp[:, gr, 0][None, :]).sum(axis=-1)[:, None]
    return out


def bf16(x):
    """x rounded to bfloat16 (nearest, ties to even) as kv_quant.cpp and f32_to_bf16 do, as float64."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def quantize_query(q):
    """q [T, heads, hd] -> (codes, scale [T, heads, 1]): the int8 KV codec's arithmetic, per head."""
    codes, d, _ = int8_rows(q)
    return codes, d.astype(np.float64)


def int_value_sums(p, vc, vs, group):
    """sum_s p[h, t, s] * vs[s] * vc[s] with the weights (the scale folded in) quantized to 0..127
    per head, row and block of 32 keys, as attention_int.h sums int8 values: p [h, T, S],
    vc [S, kvh, hd] codes, vs [S, kvh, 1] scales. Returns [T, heads, hd]."""
    H, T, S = p.shape
    B = 32
    pad = (-S) % B
    w = (p * np.repeat(vs[..., 0], group, axis=1).T[:, None, :]).astype(np.float32)  # [h, T, S]
    w = np.pad(w, ((0, 0), (0, 0), (0, pad))).reshape(H, T, -1, B)
    wmax = w.max(axis=-1, keepdims=True)
    ws = (wmax / np.float32(127)).astype(np.float32)
    tiny = np.finfo(np.float32).tiny  # kvlm: a block whose scale is below FLT_MIN weighs zero
    inv = np.where(ws >= tiny, np.float32(1) / np.where(ws >= tiny, ws, 1), 0).astype(np.float32)
    u = np.minimum(np.rint(w * inv), 127).astype(np.int64)  # [h, T, blocks, B]
    c = np.pad(np.repeat(vc, group, axis=1), ((0, pad), (0, 0), (0, 0))).reshape(-1, B, H, vc.shape[-1])  # [blocks, B, h, hd]
    sums = np.einsum("htbj,bjhd->htbd", u, c).astype(np.float64)
    return np.einsum("htbd,htb->thd", sums, ws[..., 0].astype(np.float64))


def attention(q, k, v, group, hd, kv, qmode, vmode="float"):
    """Causal attention; kv: 'f64' (exact), 'int8' or 'int4' (stored rows); qmode: 'float' scores
    from decoded keys, 'int' integer scores against the int8 query; vmode (int8): 'float' value
    sums of the decoded rows, 'int' integer value sums (int_value_sums)."""
    T, heads, _ = q.shape
    scale = 1.0 / np.sqrt(hd)
    if kv == "f64":
        kd, vd = k, v
    elif kv == "int8":
        kc, ks, kd = int8_rows(k)
        vd = int8_rows(v)[2]
    elif kv == "bf16":
        kd, vd = bf16(k), bf16(v)
    elif kv == "int4kv":  # groups along the KV row, as kvlm stores them; scores from decoded keys
        kd, vd = int4_kv_rows(k)[3], None
    else:
        kc, ks, kz, kd = int4_rows(k)
        vd = int4_rows(v)[3]
    kh = np.repeat(kd, group, axis=1)  # [T, heads, hd]
    if qmode == "float" or kv == "f64":
        s = np.einsum("thd,shd->hts", q, kh) * scale
    elif kv == "bf16":  # the query rounded to bf16 (attention_bf16.h)
        s = np.einsum("thd,shd->hts", bf16(q), kh) * scale
    else:
        qc, qs = quantize_query(q)
        qsc = qs[..., 0] * scale  # [T, heads]
        if kv == "int8":
            kch = np.repeat(kc, group, axis=1)
            ksh = np.repeat(ks[..., 0], group, axis=1)  # [S, heads]
            dots = np.einsum("thd,shd->hts", qc, kch).astype(np.float64)
            s = dots * ksh.T[:, None, :] * qsc.T[:, :, None]
        else:
            G = hd // 32
            qg = qc.reshape(T, heads, G, 32)
            kch = np.repeat(kc, group, axis=1)  # [S, heads, G, 32]
            sh = np.repeat(ks[..., 0], group, axis=1)  # [S, heads, G]
            zh = np.repeat(kz[..., 0], group, axis=1)
            dots = np.einsum("thgd,shgd->htsg", qg, kch).astype(np.float64)
            qsum = qg.sum(axis=-1).astype(np.float64)  # [T, heads, G]
            terms = dots * sh.transpose(1, 0, 2)[:, None, :, :] + zh.transpose(1, 0, 2)[:, None, :, :] * qsum.transpose(1, 0, 2)[:, :, None, :]
            s = terms.sum(axis=-1) * qsc.T[:, :, None]
    # A step's own row is attended in f32 as computed (kvlm passes fresh rows beside the cache).
    eye = np.eye(T, dtype=bool)[None]
    s = np.where(eye, np.einsum("thd,thd->ht", q, np.repeat(k, group, axis=1))[:, :, None] * scale, s)
    s = np.where(np.tril(np.ones((T, T), dtype=bool))[None], s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    p = s / s.sum(axis=-1, keepdims=True)
    vh = np.repeat(vd, group, axis=1) if vd is not None else None
    vx = np.repeat(v, group, axis=1)
    own = np.einsum("ht,thd->thd", p[:, np.arange(T), np.arange(T)], vx)
    if vmode == "int" and kv == "int8":
        vc, vs, _ = int8_rows(v)
        return int_value_sums(np.where(eye, 0, p), vc, vs, group) + own
    if vmode == "bf16":  # the softmax weights rounded to bf16 (kvlm's are before normalizing: the same relative rounding)
        return np.einsum("hts,shd->thd", bf16(np.where(eye, 0, p)), vh) + own
    if kv == "int4kv":
        if vmode == "int":
            return int4_value_sums(np.where(eye, 0, p), v, group) + own
        vh = np.repeat(int4_kv_rows(v)[3], group, axis=1)
    return np.einsum("hts,shd->thd", np.where(eye, 0, p), vh) + own


def forward(m, tokens, kv="f64", qmode="float", vmode="float"):
    T, hd, heads, kvh = len(tokens), m["hd"], m["heads"], m["kv_heads"]
    x = m["emb"][tokens]
    for l in range(m["layers"]):
        h = rmsnorm(x, m["rms_att"][l])
        q = rope((h @ m["wq"][l].T).reshape(T, heads, hd), hd)
        k = rope((h @ m["wk"][l].T).reshape(T, kvh, hd), hd)
        v = (h @ m["wv"][l].T).reshape(T, kvh, hd)
        a = attention(q, k, v, heads // kvh, hd, kv, qmode, vmode).reshape(T, heads * hd)
        x = x + a @ m["wo"][l].T
        h = rmsnorm(x, m["rms_ffn"][l])
        g = h @ m["w1"][l].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ m["w3"][l].T)) @ m["w2"][l].T
    return rmsnorm(x, m["rms_final"]) @ m["cls"].T


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=os.environ.get("KVLM_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "shared")))
    ap.add_argument("--windows", type=int, default=8, help="512-token windows of the TinyStories sample")
    args = ap.parse_args()
    m = load_llama2c(os.path.join(args.shared, "models/stories260K/stories260K.bin"))
    ppl = json.load(open(os.path.join(args.shared, "golden/stories260K/perplexity.json")))
    ids = json.load(open(os.path.join(args.shared, "golden/stories260K/perplexity_tokens.json")))
    ids = ids["token_ids"] if isinstance(ids, dict) else ids
    W = 512
    windows = [np.array(ids[W * w:W * w + W]) for w in range(args.windows)]

    # The forward is checked against the llama2.c golden before it measures anything.
    for w in range(2):
        lp = log_softmax(forward(m, windows[w]))
        nll = -lp[np.arange(W - 1), windows[w][1:]].sum()
        want = ppl["per_window_nll_sum_nats"][w]
        assert abs(nll - want) < 1e-2, (w, nll, want)
        print(f"window {w}: NLL {nll:.4f} nats, llama2.c golden {want:.4f}")

    print(f"\n{args.windows} windows of {W} tokens; every cached row stored encoded (no f32 window), a step's own row in f32\n")
    print("| model | group | KV | scores | mean KLD vs exact (nats) | p99 KLD | top-1 agrees | mean NLL |")
    print("|---|---|---|---|---|---|---|---|")
    for label, model in (("stories260K", m), ("stories260K, KV heads pooled in pairs", pool_kv_heads(m))):
        group = model["heads"] // model["kv_heads"]
        ref = [log_softmax(forward(model, t)) for t in windows]
        nll_ref = np.mean([-r[np.arange(W - 1), t[1:]].mean() for r, t in zip(ref, windows)])
        print(f"| {label} | {group} | f64 | exact | 0 | 0 | 100% | {nll_ref:.5f} |")

        def row(kv, qmode, vmode, kv_name, name):
            kl, agree, nll = [], [], []
            for r, t in zip(ref, windows):
                o = log_softmax(forward(model, t, kv, qmode, vmode))
                kl.append((np.exp(r) * (r - o)).sum(axis=-1))
                agree.append(r.argmax(-1) == o.argmax(-1))
                nll.append(-o[np.arange(W - 1), t[1:]].mean())
            kl, agree = np.concatenate(kl), np.concatenate(agree)
            print(f"| {label} | {group} | {kv_name} | {name} | {kl.mean():.3e} | {np.quantile(kl, 0.99):.3e} | "
                  f"{100 * agree.mean():.2f}% | {np.mean(nll):.5f} |")

        # int4 groups of 32 lie within a head only where the head size is a multiple of 32 (kvlm
        # scores int4 keys in integers only then); stories260K's heads are 8 wide.
        for kv in ("int8", "int4") if model["hd"] % 32 == 0 else ("int8",):
            modes = [("float", "float", "f32 from decoded keys"), ("int", "float", "integer, int8 query")]
            if kv == "int8":
                modes += [("float", "int", "f32 scores, integer value sums"), ("int", "int", "integer scores and value sums")]
            for qmode, vmode, name in modes:
                row(kv, qmode, vmode, kv, name)
        # bf16 KV: f32 arithmetic on the decoded rows, or bf16 products (the query and the softmax
        # weights rounded to bf16, as attention_bf16.h computes them with AVX-512 BF16).
        row("bf16", "float", "float", "bf16", "f32 from decoded keys and values")
        row("bf16", "bf16", "float", "bf16", "bf16 query")
        row("bf16", "bf16", "bf16", "bf16", "bf16 query and weights")
        # int4 as kvlm stores it (groups of 32 along the KV row, so across this model's heads): f32
        # scores from the decoded keys, values from decoded rows or summed in integers. The pooled
        # model's KV rows are 16 wide: no int4 codec for them.
        if model["kv_heads"] * model["hd"] % 32 == 0:
            row("int4kv", "float", "float", "int4", "f32 scores, f32 value sums")
            row("int4kv", "float", "int", "int4", "f32 scores, integer value sums")


if __name__ == "__main__":
    main()
