"""Independent float64 NumPy oracle of the contract (docs/contract.md), written as plain loops.

Nothing here calls dsv41_jax: it decodes cache bytes itself and implements the selection rules
straight from the contract, so the library's vectorised code is checked against a second reading.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

INT32_MAX = 2**31 - 1
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


# ----------------------------------------------------------------------------- decoding
def e2m1(code: int) -> float:
    v = E2M1[code & 7]
    return -v if code & 8 else v


def ue8m0(byte: int) -> float:
    return 0.0 if byte == 0 else 2.0 ** (int(byte) - 127)


def cache_token(data: np.ndarray, fmt: str, page: int, off: int) -> tuple[np.ndarray, float]:
    """(key float64 [D] with block scales applied, per-token scale) of one cached token."""
    pages, p, _, row = data.shape
    flat = data.reshape(pages, p * row)[page]
    vb = row - 4
    vals = flat[off * vb : (off + 1) * vb]
    sb = flat[p * vb + off * 4 : p * vb + off * 4 + 4]
    if fmt == "fp8":
        k = vals.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        return k, float(sb.view(np.float32)[0])
    k = np.zeros(2 * vb)
    for i, byte in enumerate(vals):
        k[2 * i] = e2m1(int(byte) & 0xF)
        k[2 * i + 1] = e2m1(int(byte) >> 4)
    for blk in range(2 * vb // 32):
        k[blk * 32 : (blk + 1) * 32] *= ue8m0(int(sb[blk]))
    return k, 1.0


def query_rows(values: np.ndarray, scales, fmt: str) -> np.ndarray:
    """float64 [rows, H, D] from a query bundle's arrays."""
    b, n, h = values.shape[:3]
    if fmt == "fp8":
        return values.astype(np.float64).reshape(b * n, h, -1)
    d = values.shape[3] * 2
    out = np.zeros((b * n, h, d))
    v = values.reshape(b * n, h, -1)
    s = scales.reshape(b * n, h, -1)
    for r in range(b * n):
        for hh in range(h):
            for i in range(d):
                byte = int(v[r, hh, i // 2])
                out[r, hh, i] = e2m1(byte & 0xF if i % 2 == 0 else byte >> 4) * ue8m0(
                    int(s[r, hh, i // 32])
                )
    return out


def logit(q: np.ndarray, w: np.ndarray, k: np.ndarray, s: float) -> float:
    """(Σ_h w_h · relu(q_h · k)) · s for one row and one token."""
    return float(sum(w[h] * max(float(q[h] @ k), 0.0) for h in range(q.shape[0])) * s)


# ----------------------------------------------------------------------------- logits
def paged_logits(q, w, data, fmt, context_lens, block_table, next_n, num_columns, page_size):
    """Dense logits as a dict {(row, t): value} of every visible position."""
    out = {}
    for b in range(len(context_lens)):
        for j in range(next_n):
            r = b * next_n + j
            length = max(min(int(context_lens[b]) - next_n + 1 + j, num_columns), 0)
            for t in range(length):
                page = int(block_table[b, t // page_size])
                if not 0 <= page < data.shape[0]:
                    out[(r, t)] = math.nan
                    continue
                k, s = cache_token(data, fmt, page, t % page_size)
                out[(r, t)] = logit(q[r], w[r], k, s)
    return out


# ----------------------------------------------------------------------------- selection
def better(a: tuple[float, int], b: tuple[float, int]) -> bool:
    """Contract order: larger score first, equal scores -> smaller position first."""
    return a[0] > b[0] or (a[0] == b[0] and a[1] < b[1])


def topk_row(scores, length: int, k: int, allowed=None) -> list[int]:
    ok = []
    for p in range(length):
        s = float(scores[p])
        if math.isnan(s) or s == -math.inf:
            continue
        if allowed is not None and not allowed(p):
            continue
        ok.append((s, p))
    ok.sort(key=lambda sp: (-sp[0], sp[1]))
    best = sorted(p for _, p in ok[:k])
    return best + [-1] * (k - len(best))


def topk_inside_blocks(logits, rows, blocks, k: int, block_size: int) -> np.ndarray:
    """`[rows, k]`: each row's top-k among its visible positions whose block is listed in
    `blocks[r]` (ids outside `[0, nblocks)` name nothing, repeats count once)."""
    out = []
    for r in range(len(logits)):
        n = int(rows[r])
        members = {int(x) for x in blocks[r] if 0 <= int(x) < -(-n // block_size)}
        out.append(topk_row(logits[r], n, k, lambda p, m=members: p // block_size in m))
    return np.array(out)


def block_amax_row(scores, length: int, block_size: int, nb: int, pin: bool) -> list[float]:
    out = [-math.inf] * nb
    for p in range(length):
        s = float(scores[p])
        if not math.isnan(s):
            out[p // block_size] = max(out[p // block_size], s)
    nblocks = -(-length // block_size)
    if pin and nblocks > 0:
        out[nblocks - 1] = math.inf
    return out


def candidate_row(block_scores, length: int, c: int, block_size: int) -> list[int]:
    nblocks = min(-(-length // block_size), len(block_scores))
    if nblocks == 0:
        return [-1] * c
    newest = nblocks - 1
    rest = [
        (-math.inf if math.isnan(float(block_scores[b])) else float(block_scores[b]), b)
        for b in range(nblocks - 1)
    ]
    rest.sort(key=lambda sb: (-sb[0], sb[1]))
    chosen = sorted([newest] + [b for _, b in rest[: c - 1]])
    return chosen + [-1] * (c - len(chosen))


def table_row(selected, length: int, page_row, block_size: int, page_size: int):
    """(blocks, count, valid_len, physical) of one row of the published table."""
    c = len(selected)
    nblocks = -(-length // block_size)
    blocks = sorted({int(b) for b in selected if 0 <= int(b) < nblocks})
    count = len(blocks)
    if count == 0:
        valid = 0
    elif blocks[-1] == nblocks - 1:
        valid = block_size * (count - 1) + (length - 1) % block_size + 1
    else:
        valid = block_size * count
    physical = []
    for b in blocks:
        pos = b * block_size
        page = int(page_row[pos // page_size])
        physical.append(
            -1 if page < 0 else page * (page_size // block_size) + (pos % page_size) // block_size
        )
    pad = c - count
    return blocks + [INT32_MAX] * pad, count, valid, physical + [-1] * pad


def physical_row(indices, page_row, page_size: int) -> list[int]:
    out = []
    for p in indices:
        p = int(p)
        if p < 0 or p // page_size >= len(page_row) or int(page_row[p // page_size]) < 0:
            out.append(-1)
        else:
            out.append(int(page_row[p // page_size]) * page_size + p % page_size)
    return out
