"""Compiled (numba) kernels of the IsTree task: graphs, traces and the retriever.

Samples are generated one at a time from a 64-bit seed derived from
(seed, stream, index), so any sample can be regenerated alone and a training
stream needs no memory beyond the batch being built. Python-level generation
of retrieval traces at n=64 (~2,500 tokens each) runs at a few hundred samples
per second; these kernels are what make a GPU trial not wait for its data.

Token ids are the reference implementation's: its 16 special tokens first, in its
order (id k for SPECIALS[k]; six of them are never written), then vertex v at id
16 + v for v in 0..n. The frozen sinusoidal embedding makes the id of a token its
input vector and output row, so the ids are part of the model (docs/experiment.md).
"""

import numpy as np
from numba import njit

SPECIALS = ("[", "]", ",", "-", "PAD", "EOS", "TRUE", "FALSE", "SPACE", "NEWLINE", "UNK", "BOS",
            "STARTSEARCH", "ENDSEARCH", "FAILED", "~")
DASH, PAD, EOS, TRUE, FALSE, BOS, START, END, FAILED, TILDE = (
    SPECIALS.index(t) for t in ("-", "PAD", "EOS", "TRUE", "FALSE", "BOS", "STARTSEARCH", "ENDSEARCH", "FAILED", "~")
)
V0 = len(SPECIALS)  # the id of vertex 0

FAMILIES = ("binary", "random")
SETUPS = ("vanilla", "cot", "retrieval")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True)
def _mix(z):
    """splitmix64's finaliser: a bijective 64-bit hash."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def sample_seed(seed, stream, index):
    """The seed of sample `index` of `stream`; distinct triples give unrelated seeds."""
    z = _mix(np.uint64(seed) * _GOLDEN + np.uint64(stream))
    return _mix(z ^ (np.uint64(index) * _GOLDEN + np.uint64(0x632BE59BD9B4E019)))


@njit(cache=True)
def _uniform(state, k):
    """Draws an integer in [0, k) from a splitmix64 stream; returns (new state, value)."""
    state = state + _GOLDEN
    u = np.float64(_mix(state) >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    return state, np.int64(u * k)


@njit(cache=True)
def _shuffle(state, a):
    for i in range(a.shape[0] - 1, 0, -1):
        state, j = _uniform(state, i + 1)
        a[i], a[j] = a[j], a[i]
    return state


@njit(cache=True)
def _binary_graph(state, n, eu, ev):
    """Two stars and one extra edge between consecutive leaves p[i], p[i+1]: a tree
    exactly when they hang off different centres. Returns the new state."""
    p = np.arange(n)
    state = _shuffle(state, p)
    for i in range(2, n):
        state, coin = _uniform(state, 2)
        eu[i - 2] = p[coin]
        ev[i - 2] = p[i]
    state, k = _uniform(state, n - 3)
    i = 2 + k
    eu[n - 2] = p[i]
    ev[n - 2] = p[i + 1]
    return state


@njit(cache=True)
def _find(root, v):
    while root[v] != v:
        root[v] = root[root[v]]
        v = root[v]
    return v


@njit(cache=True)
def _random_graph(state, n, eu, ev):
    """A uniform-attachment random tree, or (half the time) one edge of it moved to
    close a cycle inside one side of the cut it opens; always n-1 distinct edges.
    Returns the new state."""
    order = np.arange(n)
    state = _shuffle(state, order)
    for i in range(1, n):
        state, j = _uniform(state, i)
        eu[i - 1] = order[i]
        ev[i - 1] = order[j]
    state, coin = _uniform(state, 2)
    if coin == 0:
        return state
    adjacent = np.zeros((n, n), np.bool_)
    for e in range(n - 1):
        adjacent[eu[e], ev[e]] = True
        adjacent[ev[e], eu[e]] = True
    root = np.empty(n, np.int64)
    while True:
        state, removed = _uniform(state, n - 1)
        for v in range(n):
            root[v] = v
        for e in range(n - 1):
            if e != removed:
                root[_find(root, eu[e])] = _find(root, ev[e])
        # A side of the cut needs 3+ vertices to hold a non-edge; n >= 4 guarantees
        # some removal leaves one, so retrying terminates.
        for _ in range(4 * n * n):
            state, u = _uniform(state, n)
            state, v = _uniform(state, n)
            if u != v and not adjacent[u, v] and _find(root, u) == _find(root, v):
                eu[removed] = u
                ev[removed] = v
                return state


@njit(cache=True)
def _adjacency(n, eu, ev):
    """nbr[v, k]: the other end of the k-th input edge touching v; deg[v]: their count."""
    nbr = np.empty((n, n), np.int64)
    deg = np.zeros(n, np.int64)
    for e in range(eu.shape[0]):
        a, b = eu[e], ev[e]
        nbr[a, deg[a]] = b
        deg[a] += 1
        nbr[b, deg[b]] = a
        deg[b] += 1
    return nbr, deg


@njit(cache=True)
def _cot_trace(n, nbr, deg, out, sup, pos):
    """DFS from 0 as an Euler tour (a vertex is written on entry and on every return
    to it), neighbours in input order. Meeting a visited vertex other than the parent
    stops at once without writing it, so the trace ends with the vertex being
    expanded: the cycle (docs/experiment.md, as the reference). Returns (pos, tree found)."""
    visited = np.zeros(n, np.bool_)
    parent = np.full(n, -1, np.int64)
    ptr = np.zeros(n, np.int64)
    stack = np.empty(n, np.int64)
    top = 0
    stack[0] = 0
    visited[0] = True
    n_visited = 1
    out[pos] = V0
    sup[pos] = 1
    pos += 1
    while top >= 0:
        t = stack[top]
        if ptr[t] < deg[t]:
            c = nbr[t, ptr[t]]
            ptr[t] += 1
            if c == parent[t]:
                continue
            if visited[c]:
                return pos, False
            out[pos] = V0 + c
            sup[pos] = 1
            pos += 1
            visited[c] = True
            n_visited += 1
            parent[c] = t
            top += 1
            stack[top] = c
        else:
            top -= 1
            if top >= 0:
                out[pos] = V0 + stack[top]
                sup[pos] = 1
                pos += 1
    return pos, n_visited == n


@njit(cache=True)
def _emit(out, sup, pos, tok, supervised):
    out[pos] = tok
    sup[pos] = supervised
    return pos + 1


@njit(cache=True)
def _tok(v):
    """The token of vertex v, or FAILED for -1."""
    return FAILED if v < 0 else V0 + v


@njit(cache=True)
def _query(out, sup, pos, v, op, u, answer):
    """Writes `STARTSEARCH v op [u] ENDSEARCH answer` (u, answer: vertices, -1 for
    none / FAILED); the answer is the retriever's (no loss), the rest the model's."""
    pos = _emit(out, sup, pos, START, 1)
    pos = _emit(out, sup, pos, V0 + v, 1)
    pos = _emit(out, sup, pos, op, 1)
    if u >= 0:
        pos = _emit(out, sup, pos, V0 + u, 1)
    pos = _emit(out, sup, pos, END, 1)
    return _emit(out, sup, pos, _tok(answer), 0)


@njit(cache=True)
def _retrieval_trace(n, nbr, deg, out, sup, pos):
    """The DFS of `_cot_trace` with every look-up written as a retrieval query (see
    docs/experiment.md, setup 3). Vertices are numbers here, -1 is FAILED. Returns (pos, tree found)."""
    recorded = np.full(n, -1, np.int64)  # what `v ~` answers: the `v ~ u` record
    stack = np.empty(n, np.int64)
    st_ptr = np.empty(n, np.int64)  # index in nbr[v] of the last neighbour asked for
    top = 0
    stack[0] = 0
    st_ptr[0] = -1
    n_visited = 1
    while top >= 0:
        t = stack[top]
        pos = _emit(out, sup, pos, V0 + t, 1)
        p = recorded[t]  # the root is never recorded: -1
        pos = _query(out, sup, pos, t, TILDE, -1, p)
        k = st_ptr[top] + 1
        c = nbr[t, k] if k < deg[t] else -1
        pos = _query(out, sup, pos, t, DASH, -1 if k == 0 else nbr[t, k - 1], c)
        if c >= 0 and c == p:
            k += 1
            c = nbr[t, k] if k < deg[t] else -1
            pos = _query(out, sup, pos, t, DASH, p, c)
        st_ptr[top] = k
        if c < 0:
            top -= 1
            continue
        a = recorded[c]
        pos = _query(out, sup, pos, c, TILDE, -1, a)
        # `0 ~` answers FAILED, yet the root is always visited: meeting it closes a
        # cycle, and the trace stops right after the query (the reference's rule).
        if a >= 0 or c == 0:
            return pos, False
        pos = _emit(out, sup, pos, V0 + c, 1)
        pos = _emit(out, sup, pos, TILDE, 1)
        pos = _emit(out, sup, pos, V0 + t, 1)
        recorded[c] = t
        n_visited += 1
        top += 1
        stack[top] = c
        st_ptr[top] = -1
    return pos, n_visited == n


@njit(cache=True)
def _is_tree(n, eu, ev):
    """n-1 edges form a tree exactly when none of them closes a cycle."""
    root = np.arange(n)
    for e in range(eu.shape[0]):
        a, b = _find(root, eu[e]), _find(root, ev[e])
        if a == b:
            return False
        root[a] = b
    return True


def max_length(n, setup):
    """An upper bound on the token count of one sample (BOS to answer)."""
    prompt = 3 * (n - 1) + 2
    if setup == 0:
        return prompt + 1
    if setup == 1:
        return prompt + 2 * n + 2
    # A DFS step writes at most 1 + 5 + 6 + 6 + 5 + 3 tokens (when it pushes);
    # there are at most n - 1 pushes and n pops.
    return prompt + 26 * 2 * n + 2


@njit(cache=True)
def render(n, setup, eu, ev, out, sup):
    """Writes the sample of the graph whose edges, in input order, are (eu[e], ev[e]):
    `BOS edges EOS [trace EOS] answer` into out (token ids) and sup (1 where the
    token carries loss). Returns (length, is_tree)."""
    pos = _emit(out, sup, 0, BOS, 0)
    for e in range(eu.shape[0]):
        pos = _emit(out, sup, pos, V0 + max(eu[e], ev[e]), 0)
        pos = _emit(out, sup, pos, DASH, 0)
        pos = _emit(out, sup, pos, V0 + min(eu[e], ev[e]), 0)
    pos = _emit(out, sup, pos, EOS, 0)
    if setup == 0:
        is_tree = _is_tree(n, eu, ev)
    else:
        nbr, deg = _adjacency(n, eu, ev)
        if setup == 1:
            pos, is_tree = _cot_trace(n, nbr, deg, out, sup, pos)
        else:
            pos, is_tree = _retrieval_trace(n, nbr, deg, out, sup, pos)
        pos = _emit(out, sup, pos, EOS, 1)
    pos = _emit(out, sup, pos, TRUE if is_tree else FALSE, 1)
    return pos, is_tree


@njit(cache=True)
def fill_batch(n, family, setup, seed, stream, start, tokens, sup, lengths, labels):
    """Writes samples start..start+B-1 of a stream into row-padded arrays.

    tokens (B, T) int64 is pre-filled with PAD by the caller; sup (B, T) uint8 marks
    the tokens that carry loss; lengths and labels are (B,) outputs.
    """
    eu = np.empty(n - 1, np.int64)
    ev = np.empty(n - 1, np.int64)
    for b in range(tokens.shape[0]):
        state = sample_seed(seed, stream, start + b)
        if family == 0:
            state = _binary_graph(state, n, eu, ev)
        else:
            state = _random_graph(state, n, eu, ev)
        perm = np.arange(n - 1)
        state = _shuffle(state, perm)
        lengths[b], labels[b] = render(n, setup, eu[perm], ev[perm], tokens[b], sup[b])


@njit(cache=True)
def _is_vertex(tok, n):
    return V0 <= tok <= V0 + n


@njit(cache=True)
def retrieve(seq, length, n):
    """Answers the query that ends `seq[:length]` (last token ENDSEARCH) from the text.

    `v ~`: the parent in the first record `v ~ u` after the first EOS (FAILED for
    vertex 0 and for v never recorded). `v -`: the other end of the first input edge
    touching v. `v - u`: the other end of the next input edge touching v after
    edge {v, u}. A malformed query, or one with no answer, gets FAILED.
    """
    failed = FAILED
    q = length - 2
    while q >= 0 and seq[q] != START:
        q -= 1
    if q < 0:
        return failed
    q_len = length - 1 - (q + 1)
    eos = 0
    while eos < length and seq[eos] != EOS:
        eos += 1
    if q_len < 2 or q_len > 3 or not _is_vertex(seq[q + 1], n):
        return failed
    v = seq[q + 1]
    op = seq[q + 2]
    if op == TILDE and q_len == 2:
        if v == V0:
            return failed
        for i in range(eos + 1, q - 2):
            if seq[i] == v and seq[i + 1] == TILDE and _is_vertex(seq[i + 2], n):
                return seq[i + 2]
        return failed
    if op != DASH:
        return failed
    n_edges = (eos - 1) // 3
    i = 0
    if q_len == 3:
        u = seq[q + 3]
        while i < n_edges:
            a, b = seq[1 + 3 * i], seq[3 + 3 * i]
            i += 1
            if (a == v and b == u) or (a == u and b == v):
                break
        else:
            return failed
    while i < n_edges:
        a, b = seq[1 + 3 * i], seq[3 + 3 * i]
        if a == v:
            return b
        if b == v:
            return a
        i += 1
    return failed


@njit(cache=True)
def retrieve_rows(seqs, lengths, rows, n, answers):
    """`retrieve` for each row index in `rows` of a (B, T) token array."""
    for k in range(rows.shape[0]):
        r = rows[k]
        answers[k] = retrieve(seqs[r], lengths[r], n)
