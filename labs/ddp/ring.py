"""Ring All-Reduce from point-to-point messages: the readable version (chapter 4) and the
pipelined one (chapter 8), both in place and summing, on any backend that has isend/irecv.

Both cut the tensor into N chunks with ``tensor_split`` (sizes may differ by one element) and run
2(N-1) steps: N-1 of reduce-scatter, N-1 of all-gather. In step t rank r sends chunk (r-t) mod N
to its right neighbour and receives chunk (r-t-1) mod N from its left one; the chunk it receives
in step t is the one it sends in step t+1.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

SEGMENT_BYTES = 2 << 20  # 파이프라인 세그먼트 크기: 조용한 2코어 기계(gloo, N=2)에서 512K–16M을 번갈아 재어 고른 값 (README "성능")
WINDOW = 2  # 미리 걸어 두는 수신 수: 하나를 더하는 동안 다음 하나가 도착한다 (이중 버퍼)


class P2P:
    """Point-to-point sends and receives that count the payload bytes they move."""

    def __init__(self):
        self.sent = 0
        self.received = 0

    def send(self, tensor: torch.Tensor, dst: int) -> None:
        self.sent += tensor.numel() * tensor.element_size()
        dist.send(tensor, dst)

    def recv(self, tensor: torch.Tensor, src: int) -> None:
        self.received += tensor.numel() * tensor.element_size()
        dist.recv(tensor, src)

    def isend(self, tensor: torch.Tensor, dst: int) -> dist.Work | None:
        self.sent += tensor.numel() * tensor.element_size()
        return dist.isend(tensor, dst)

    def irecv(self, tensor: torch.Tensor, src: int) -> dist.Work | None:
        self.received += tensor.numel() * tensor.element_size()
        return dist.irecv(tensor, src)

    def exchange(self, outgoing: torch.Tensor, dst: int, incoming: torch.Tensor, src: int) -> None:
        """Send to ``dst`` and receive from ``src`` at the same time (no deadlock in a ring)."""
        request = self.isend(outgoing, dst)
        self.recv(incoming, src)
        request.wait()


def ring_all_reduce_(buf: torch.Tensor, p2p: P2P, on_step=None) -> torch.Tensor:
    """Ring All-Reduce (sum, in place) from point-to-point messages.

    The tensor is cut into N chunks (``tensor_split``: sizes may differ by one element). In
    reduce-scatter each step sends one chunk to the right neighbour and adds the chunk coming
    from the left; after N-1 steps rank r holds the full sum of chunk (r+1) mod N. In
    all-gather each step passes a finished chunk on; after N-1 more steps every rank has all.
    ``on_step(phase, step, sent_chunk, received_chunk)`` is called after every step.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = buf.tensor_split(n)  # 뷰(view)다: 청크를 고치면 buf가 바뀐다
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):  # 1단계 Reduce-Scatter: 받은 청크에 내 값을 더해 다음 랭크로
        send_i, recv_i = (rank - step) % n, (rank - step - 1) % n
        incoming = torch.empty_like(chunks[recv_i])
        p2p.exchange(chunks[send_i], right, incoming, left)
        chunks[recv_i].add_(incoming)
        if on_step:
            on_step("reduce-scatter", step, send_i, recv_i)
    for step in range(n - 1):  # 2단계 All-Gather: 완성된 청크를 그대로 전달
        send_i, recv_i = (rank + 1 - step) % n, (rank - step) % n
        p2p.exchange(chunks[send_i], right, chunks[recv_i], left)
        if on_step:
            on_step("all-gather", step, send_i, recv_i)
    return buf


OnSegment = Callable[[str, int, int, int], None]


def pipelined_ring_all_reduce_(buf: torch.Tensor, p2p: P2P, segment_bytes: int = SEGMENT_BYTES,
                               on_segment: OnSegment | None = None) -> torch.Tensor:
    """The same ring, with every chunk sent as segments that flow through the ring one by one.

    ``buf`` is a contiguous 1-D tensor. The segments of step t+1 are the segments received in
    step t, so as soon as segment k has arrived (and, in reduce-scatter, been added) it is sent on;
    meanwhile the next ``WINDOW``-1 segments are already in flight into their own receive buffers.
    The add of one segment therefore overlaps the transfer of the next, and the steps overlap
    each other, the way gloo and NCCL pipeline. ``on_segment(event, step, chunk, segment)`` is
    called when this rank starts to wait for a segment ("wait"), when it has arrived ("arrived")
    and when it has been added ("added"; in all-gather right after "arrived": nothing to add).
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    if n == 1:
        return buf
    right, left = (rank + 1) % n, (rank - 1) % n
    per_segment = max(1, segment_bytes // buf.element_size())
    segments = [chunk.split(per_segment) for chunk in buf.tensor_split(n)]
    steps = 2 * (n - 1)
    # 받을 메시지의 순서: 단계 t에는 청크 (rank-t-1) mod N의 세그먼트들이 차례로 온다
    arrivals = [(t, (rank - t - 1) % n, k) for t in range(steps) for k in range(len(segments[(rank - t - 1) % n]))]
    scratch = [torch.empty(min(per_segment, segments[0][0].numel()), dtype=buf.dtype, device=buf.device)
               for _ in range(WINDOW)]  # 호출마다 한 번만 만든다
    sending: dict[tuple[int, int], dist.Work | None] = {}

    def post(i: int) -> dist.Work | None:
        t, chunk, k = arrivals[i]
        if t < n - 1:  # Reduce-Scatter: 임시 버퍼로 받아 더한다
            target = scratch[i % WINDOW][: segments[chunk][k].numel()]
        else:  # All-Gather: 자기 자리로 바로 받는다. 그 자리에서 아직 보내는 중이면 끝나길 기다린다
            pending = sending.pop((chunk, k), None)
            if pending is not None:
                pending.wait()
            target = segments[chunk][k]
        return p2p.irecv(target, left)

    def send(chunk: int, k: int) -> None:
        previous = sending.pop((chunk, k), None)
        if previous is not None:
            previous.wait()
        sending[(chunk, k)] = p2p.isend(segments[chunk][k], right)

    for k in range(len(segments[rank])):  # 단계 0: 내 청크를 세그먼트마다 보낸다
        send(rank, k)
    posted = [post(i) for i in range(min(WINDOW, len(arrivals)))]
    for i, (t, chunk, k) in enumerate(arrivals):
        if on_segment:
            on_segment("wait", t, chunk, k)
        posted[i].wait()
        if on_segment:
            on_segment("arrived", t, chunk, k)
        if t < n - 1:
            seg = segments[chunk][k]
            torch.add(seg, scratch[i % WINDOW][: seg.numel()], out=seg)  # 더하는 동안 다음 세그먼트가 도착한다
        if on_segment:
            on_segment("added", t, chunk, k)
        if i + WINDOW < len(arrivals):
            posted.append(post(i + WINDOW))
        if t + 1 < steps:
            send(chunk, k)  # 받은 세그먼트가 곧 다음 단계에 보낼 세그먼트다
    for request in sending.values():
        request.wait()
    return buf


def all_reduce_fns(buf: torch.Tensor, segment_bytes: int) -> dict:
    """The three All-Reduce implementations on ``buf`` (sum, in place), by name."""
    return {"library": lambda: dist.all_reduce(buf), "ring": lambda: ring_all_reduce_(buf, P2P()),
            "pipelined": lambda: pipelined_ring_all_reduce_(buf, P2P(), segment_bytes)}
