"""An independent reading of docs/experiment.md's IsTree rules, in plain Python over token
strings, for the tests: no code shared with the compiled kernels.

The CoT trace is a recursive DFS; the retrieval trace is a DFS that learns every
fact (parents, neighbours) by asking `text_retrieve`, which reads only the text
written so far, as the retriever of a real generation loop would.
"""

import sys

import networkx as nx


def edges_of(tokens: list[str]) -> list[tuple[int, int]]:
    """The input edges of a sample, in order, parsed from its token strings."""
    eos = tokens.index("EOS")
    body = tokens[1:eos]
    assert len(body) % 3 == 0 and all(body[i + 1] == "-" for i in range(0, len(body), 3))
    return [(int(body[i]), int(body[i + 2])) for i in range(0, len(body), 3)]


def is_tree(n: int, edges) -> bool:
    g = nx.Graph(edges)
    g.add_nodes_from(range(n))
    return nx.is_tree(g)


def cot_trace(n: int, edges) -> tuple[list[int], bool]:
    """The Euler tour of the DFS from 0 (neighbours in input order), cut where it
    meets a visited non-parent vertex, which is not written; and the answer."""
    nbrs = {v: [] for v in range(n)}
    for u, v in edges:
        nbrs[u].append(v)
        nbrs[v].append(u)
    trace, visited = [], {0}

    class Cycle(Exception):
        pass

    def visit(v, parent):
        trace.append(v)
        for c in nbrs[v]:
            if c == parent:
                continue
            if c in visited:
                raise Cycle
            visited.add(c)
            visit(c, v)
            trace.append(v)

    sys.setrecursionlimit(max(1000, 4 * n))
    try:
        visit(0, None)
    except Cycle:
        return trace, False
    return trace, len(visited) == n


def text_retrieve(text: list[str]) -> str:
    """Answers the query that ends `text` (`... STARTSEARCH q ENDSEARCH`) from the text."""
    start = len(text) - 1 - text[::-1].index("STARTSEARCH")
    query = text[start + 1 : -1]
    eos = text.index("EOS")
    edges = edges_of(text[: eos + 1])
    if query[1:] == ["~"]:  # the parent recorded as `v ~ u` in the trace
        trace = text[eos + 1 : start]
        for i in range(len(trace) - 2):
            if trace[i] == query[0] and trace[i + 1] == "~" and trace[i + 2].isdigit():
                return trace[i + 2]
        return "FAILED"
    v = int(query[0])
    after = 0
    if len(query) == 3:  # `v - u`: look past the edge {v, u}
        u = int(query[2])
        after = next(i for i, e in enumerate(edges) if set(e) == {u, v}) + 1
    for a, b in edges[after:]:
        if v in (a, b):
            return str(b if a == v else a)
    return "FAILED"


def retrieval_sample(n: int, edges) -> tuple[list[str], list[int], bool]:
    """Tokens, loss mask and answer of the retrieval setup."""
    text = ["BOS"] + [tok for u, v in edges for tok in (str(u), "-", str(v))] + ["EOS"]
    sup = [0] * len(text)

    def write(*tokens):
        text.extend(tokens)
        sup.extend([1] * len(tokens))

    def ask(*query):
        write("STARTSEARCH", *query, "ENDSEARCH")
        text.append(text_retrieve(text))
        sup.append(0)  # the retriever's answer carries no loss
        return text[-1]

    stack = [["0", None]]  # vertex, the child last explored from it
    visited = {"0"}
    answer = True
    while stack:
        t, prev = stack[-1]
        write(t)
        parent = ask(t, "~")
        c = ask(t, "-") if prev is None else ask(t, "-", prev)
        if c == parent != "FAILED":
            c = ask(t, "-", parent)
        if c == "FAILED":
            stack.pop()
            continue
        if ask(c, "~") != "FAILED" or c == "0":
            answer = False  # c was visited: a cycle
            break
        write(c, "~", t)
        visited.add(c)
        stack[-1][1] = c
        stack.append([c, None])
    answer = answer and len(visited) == n
    write("EOS", "TRUE" if answer else "FALSE")
    return text, sup, answer


def sample(n: int, setup: str, edges) -> dict:
    """The record docs/experiment.md prescribes for one graph and setup."""
    if setup == "retrieval":
        tokens, sup, label = retrieval_sample(n, edges)
        return {"tokens": tokens, "supervised": sup, "label": label}
    prompt = ["BOS"] + [tok for u, v in edges for tok in (str(u), "-", str(v))] + ["EOS"]
    if setup == "vanilla":
        label = is_tree(n, edges)
        after = []
    else:
        trace, label = cot_trace(n, edges)
        after = [str(v) for v in trace] + ["EOS"]
    after.append("TRUE" if label else "FALSE")
    return {"tokens": prompt + after, "supervised": [0] * len(prompt) + [1] * len(after), "label": label}
