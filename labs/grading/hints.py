"""The report's words for every check of every interface (a DDP, a ZeRO-1 optimizer, a small FSDP): what
it looks at, the most likely cause when it fails, and where to fix it. Where a judge narrows a failure down
from its records (what the gradients were instead, why the state is not a 1/N share, which line let go of an
unwaited work object), :data:`CAUSES` has the words for that.
"""

from __future__ import annotations

# DDP의 확인 항목마다: 무엇을 보는지, 실패했을 때 가장 가능성 높은 원인, 고칠 곳
HINTS = {
    "runs_without_error": ("채점 중 예외 없이 실행", "여러분의 코드가 예외를 냈습니다. 위의 파일:행이 그 자리입니다. 다른 확인은 이 예외 "
                           "때문에 측정하지 못했거나 함께 실패했을 수 있습니다.", "예외가 난 줄"),
    "same_collectives_on_ranks": ("모든 랭크가 같은 집합 통신을 같은 순서로", "랭크마다 부르는 집합 통신이 다릅니다(버킷 크기나 순서를 "
                                  "랭크에 따라 다르게 계산했거나, 한 랭크만 부르는 호출). 그대로 두면 서로 다른 크기의 버퍼를 더하거나, "
                                  "한 랭크가 오지 않을 호출을 기다리며 멈춥니다.", "__init__의 버킷 나누기: 랭크 번호, 난수, 역전파 "
                                  "순서처럼 랭크마다 다를 수 있는 값에 기대지 마세요"),
    "broadcast_at_construction": ("생성할 때 랭크 0의 파라미터를 나눠 주기", "생성자에서 파라미터를 랭크 0에서 브로드캐스트하지 "
                                  "않았습니다. 랭크마다 다른 초기값으로 출발하면 같은 평균 그래디언트로도 복제본이 끝까지 다릅니다.",
                                  "__init__: 모든 파라미터에 dist.broadcast(tensor, src=0)"),
    "buffers_broadcast": ("생성할 때 랭크 0의 버퍼도 나눠 주기", "파라미터는 맞췄지만 버퍼(BatchNorm의 running_mean·running_var 등)를 "
                          "브로드캐스트하지 않았습니다. 평가 모드의 출력이 랭크마다 달라집니다. 위에 이름이 나온 버퍼입니다.",
                          "__init__: module.buffers()도 dist.broadcast(buffer, src=0)"),
    "handles_waited": ("돌아올 때 모든 통신이 끝나 있기", "finish_gradient_synchronization()이 돌아온 뒤에도 p.grad가 바뀌었습니다: "
                       "끝나지 않은 All-Reduce가 남아 있었습니다(핸들이나 퓨처를 기다리지 않음, 또는 .then()으로 이은 퓨처를 기다리지 "
                       "않음). 옵티마이저가 합이 도착하기 전의 값을 씁니다. 실행마다 결과가 달라지는 경쟁 상태입니다.",
                       "finish_gradient_synchronization(): 모든 핸들(또는 마지막에 이은 퓨처)에 .wait()를 부른 뒤 돌아오세요"),
    "grads_averaged": ("finish 직후 p.grad = 전역 배치의 평균 그래디언트", "", ""),
    "reduced_during_backward": ("그래디언트가 준비되면 역전파 중에 통신 시작", "역전파가 끝난 뒤에야 All-Reduce를 시작했습니다. 훅이 "
                                "불리지 않거나(걸지 않음, 잘못된 텐서에 걸음) 모든 통신을 finish_gradient_synchronization()에서 하고 "
                                "있습니다.", "파라미터마다 p.register_post_accumulate_grad_hook(hook)처럼 그래디언트가 준비될 때 불리는 "
                                "훅에서 All-Reduce를 시작하세요"),
    "collectives_per_iteration": ("반복마다의 All-Reduce 배치", "All-Reduce의 배치가 맞지 않습니다(측정값에 이유가 있습니다). 반복마다 "
                                  "호출이 늘어나면 훅을 반복마다 다시 걸고 있는 것이고, 원소가 두 번 보내지면 같은 텐서를 두 버킷에 넣은 "
                                  "것입니다.", "훅과 버킷은 __init__에서 한 번만 만들고, 버킷은 bytes(numel × element_size)로 cap과 비교"),
    "launch_order": ("역전파와 통신의 겹침", "첫 All-Reduce가 모든 그래디언트가 준비된 뒤에야 시작했습니다. 버킷을 순전파 순서로 채우면 "
                     "0번 버킷에 맨 앞 층이 들어가는데, 그 그래디언트는 역전파의 맨 마지막에 나옵니다. 결과는 맞아도 겹침이 사라집니다.",
                     "버킷은 reversed(파라미터 목록) 순서로 채우고, 훅에서 버킷이 차는 즉시 시작하세요"),
    "frozen_untouched": ("얼린 파라미터는 통신도 변경도 없이", "requires_grad=False인 파라미터를 통신 대상에 넣었거나 그 값을 "
                         "바꿨습니다.", "통신할 파라미터 목록: [p for p in module.parameters() if p.requires_grad]"),
    "tied_reduced_once": ("공유 가중치는 한 번만", "두 층이 공유하는 가중치를 두 번 보냈습니다. 층마다 파라미터를 모으면 같은 텐서가 두 "
                          "번 나옵니다.", "module.parameters()는 같은 텐서를 한 번만 냅니다: 층별 목록이나 "
                          "named_parameters(remove_duplicate=False)를 쓰지 마세요"),
    "matches_oracles": ("torch DDP·단일 프로세스와 같은 결과", "여러 스텝 뒤 파라미터가 torch DDP, 전역 배치 단일 프로세스와 다릅니다. "
                        "위의 다른 실패가 있다면 그것부터 고치세요.", "finish_gradient_synchronization(): 기다린 뒤 p.grad를 "
                        "world_size로 나누기"),
}

ZERO_HINTS = {
    "same_collectives_on_ranks": ("모든 랭크가 같은 집합 통신을 같은 순서로", "랭크마다 step()에서 부르는 집합 통신이 다릅니다(자기 몫의 "
                                  "파라미터만 broadcast하거나, 랭크마다 다른 순서로 보냄). 모든 랭크가 모든 파라미터의 broadcast(또는 "
                                  "all_gather)에 같은 순서로 참여해야 합니다: 받는 랭크도 같은 호출을 합니다.", "step()의 나누기: 모든 "
                                  "파라미터를 같은 순서로 돌며, 주인 랭크를 src로 dist.broadcast"),
    "step_shares_params": ("step()이 업데이트한 파라미터를 모두에게 나누기", "step()이 자기 샤드만 업데이트하고 나누지 않습니다: 집합 "
                           "통신이 없거나 파라미터의 일부만 보냅니다. 다른 랭크는 그 파라미터의 옛 값을 그대로 씁니다.", "step(): 로컬 "
                           "옵티마이저의 step() 뒤 파라미터마다 dist.broadcast(p.data, src=주인 랭크) (또는 샤드를 dist.all_gather)"),
    "replicas_identical": ("스텝 뒤 모든 랭크의 파라미터가 같음", "스텝 뒤 랭크마다 파라미터가 다릅니다: 어떤 파라미터는 주인 랭크에서만 "
                           "업데이트되고 다른 랭크에 닿지 않았습니다.", "step(): 모든 파라미터를 주인에게서 받으세요(빠진 파라미터가 "
                           "없는지, 새로 더한 그룹도)"),
    "params_updated": ("첫 스텝 뒤 모든 파라미터가 DDP와 같음", "첫 step() 뒤 위에 나온 파라미터가 DDP와 다릅니다. 모든 랭크가 같은 "
                       "값인데 스텝 전 값 그대로라면 그 파라미터를 업데이트한 주인이 아닌 랭크(예: 언제나 랭크 0)에서 broadcast해 옛 "
                       "값으로 덮어썼습니다.", "step(): dist.broadcast의 src는 그 파라미터를 업데이트한 주인 랭크(모든 랭크가 같은 "
                       "규칙으로 계산한 배정)"),
    "state_divided": ("옵티마이저 상태가 랭크마다 약 1/N", "옵티마이저 상태가 1/N로 줄지 않았습니다: 모든 랭크가 모든 파라미터를 "
                      "업데이트해 모든 파라미터의 상태(모멘텀, Adam의 두 모멘트)를 가집니다. 결과는 맞아도 ZeRO-1이 아낄 메모리가 "
                      "그대로입니다.", "__init__: optimizer_cls에는 이 랭크가 맡은 파라미터만 넘기세요(배정에서 주인이 나인 것)"),
    "zero_grad_clears": ("zero_grad()가 모든 그래디언트를 지움", "zero_grad() 뒤에도 그래디언트가 남은 파라미터가 있습니다: "
                         "param_groups에 내 샤드만 넣어, torch.optim.Optimizer.zero_grad()가 나머지 파라미터를 보지 못합니다. 다음 "
                         "역전파에서 그래디언트가 쌓입니다.", "__init__: super().__init__(params, defaults)에 모든 파라미터를 넘겨 "
                         "param_groups가 전체를 담게 하고, 샤드는 따로 둔 옵티마이저에만"),
    "param_groups_honoured": ("add_param_group으로 더한 그룹과 그 lr", "생성한 뒤 add_param_group으로 더한 그룹이 무시되거나 그 lr이 "
                              "쓰이지 않았습니다: param_groups에는 들어갔지만 샤드의 옵티마이저에는 넘어가지 않았거나, 생성자의 lr로 "
                              "업데이트됩니다.", "add_param_group(group)을 재정의해 super().add_param_group(group) 뒤 새 파라미터에 "
                              "주인을 배정하고, 내 몫을 그 그룹의 하이퍼파라미터(lr 등)와 함께 샤드의 옵티마이저에 더하세요"),
    "matches_oracles": ("torch DDP·단일 프로세스와 같은 결과", "여러 스텝 뒤 파라미터가 torch DDP + 같은 옵티마이저, 전역 배치 단일 "
                        "프로세스와 다릅니다. 위의 다른 실패가 있다면 그것부터 고치세요.", "step(): 샤드의 옵티마이저가 받는 "
                        "하이퍼파라미터(**kwargs)가 그대로인지, 스텝마다 한 번씩만 업데이트하는지"),
}

FSDP_HINTS = {
    "same_collectives_on_ranks": ("모든 랭크가 같은 집합 통신을 같은 순서로", "랭크마다 부르는 All-Gather·Reduce-Scatter가 다릅니다(샤드 "
                                  "크기를 랭크마다 다르게 계산했거나, 한 랭크만 모으기를 건너뜀). 모든 랭크가 층마다 같은 크기로 같은 "
                                  "호출을 해야 합니다.", "__init__의 샤드 나누기: 패딩을 더해 모든 랭크의 샤드 크기를 같게(올림 나눗셈)"),
    "regathered_for_backward": ("역전파 전에 가중치를 다시 모으기", "역전파가 0바이트로 돌려준 가중치를 읽었습니다: 순전파 뒤 모은 "
                                "가중치를 버리고, 그 층의 역전파 전에 다시 모으지 않았습니다. autograd는 텐서를 쥐고 있지만 그 바이트는 "
                                "이미 없습니다.", "그 층의 역전파가 시작되기 직전에 다시 All-Gather하세요(예: 순전파 훅에서 출력에 "
                                "output.register_hook(…)을 걸어), 그리고 그 층의 역전파가 끝난 뒤에 버리세요"),
    "grads_averaged": ("샤드의 그래디언트 = 전역 배치의 평균", "", ""),
    "grads_fp32": ("compute_dtype에서도 마스터 가중치와 그래디언트는 float32", "compute_dtype=torch.bfloat16일 때 옵티마이저가 보는 "
                   "파라미터나 그 그래디언트가 float32가 아닙니다: 모듈을 통째로 낮은 정밀도로 바꿨거나 그래디언트를 compute dtype으로 "
                   "둔 채 저장했습니다. 작은 업데이트가 bfloat16의 반올림에 묻힙니다.", "샤드(마스터 가중치)는 float32로 두고, 모으기와 "
                   "계산만 compute_dtype으로(shard.to(compute_dtype)); Reduce-Scatter한 그래디언트는 .to(torch.float32)로 바꿔 샤드의 "
                   ".grad에"),
    "params_sharded": ("랭크마다 가중치의 약 1/N만 저장", "래퍼의 파라미터가 감싼 층 가중치의 1/N보다 많습니다: 전체 가중치가 파라미터로 "
                       "남아 있거나 샤드가 나뉘지 않았습니다.", "__init__: 층의 weight를 평평하게 펴고 패딩한 뒤 내 조각만 "
                       "nn.Parameter로 남기고 전체 가중치는 지우세요(layer._parameters[\"weight\"] = shard)"),
    "gathered_freed": ("모은 가중치를 쓴 뒤 버리기", "순전파나 역전파가 끝난 뒤에도 모은 전체 가중치가 메모리에 남아 있습니다(다시 "
                       "나누지 않음): 결과는 맞아도 FSDP가 아낄 메모리가 DDP와 같아집니다.", "순전파 훅(register_forward_hook)과 그 층의 "
                       "역전파 뒤에 모은 버퍼의 저장소를 돌려주세요(buffer.untyped_storage().resize_(0))"),
    "matches_single": ("단일 프로세스와 같은 결과", "여러 스텝 뒤 gather_full_params()가 전역 배치 단일 프로세스의 파라미터와 다릅니다. "
                       "위의 다른 실패가 있다면 그것부터 고치세요.", "gather_full_params(): 샤드를 All-Gather한 뒤 패딩을 잘라 원래 "
                       "모양으로, 원래 모듈의 이름으로"),
}

# 판정이 측정으로 원인을 더 좁힐 때(판정의 causes): 확인 → 원인 → (원인, 볼 곳). {이름}은 판정이 넘긴 값이다.
# 훅에 넘겨진 뒤에야 p.grad에 쌓이는 그래디언트: 텐서 훅(register_hook)의 까닭과 바로잡는 곳은 하나다
BEFORE_ACCUMULATION = ("register_hook으로 건 텐서 훅은 그래디언트가 p.grad에 쌓이기 전에 불리고, zero_grad()가 p.grad를 None으로 "
                       "지운 뒤에는 그때 p.grad가 없습니다.")
AFTER_ACCUMULATION = ("훅은 p.register_post_accumulate_grad_hook(hook)으로 거세요: 그래디언트가 p.grad에 쌓인 뒤 p를 받아 불리므로, "
                      "그때의 p.grad가 이번 역전파의 그래디언트입니다")
GRAD_CAUSES = {
    "missing": ("finish 뒤 p.grad가 None입니다: 그래디언트를 지웠거나 새 텐서로 바꿔 끼웠습니다.", "p.grad를 None으로 두지 말고 평균을 "
                "p.grad에 제자리(in-place)로 쓰세요"),
    "not_reduced": ("p.grad가 이 랭크 자신의 그래디언트 그대로입니다(또는 그것을 N으로 나눈 값): All-Reduce가 p.grad에 닿지 않았습니다. "
                    "p.data(파라미터 값)를 보냈거나, p.grad가 아닌 텐서를 보냈거나, 이 파라미터들에 훅이 없습니다.", "훅에서 p.grad를 "
                    "All-Reduce하세요(p.register_post_accumulate_grad_hook)"),
    "not_reduced_some": ("이 파라미터들만 p.grad가 이 랭크 자신의 그래디언트 그대로입니다: {params}. 나머지는 평균이 맞으므로, 이 "
                         "파라미터들이 훅이나 버킷에서 빠졌습니다.", "훅을 거는 목록과 버킷에 넣는 목록이 학습하는 모든 파라미터를 "
                         "담는지 보세요"),
    "hook_before_grad": ("훅이 불릴 때 p.grad가 아직 없어(None) 보낸 그래디언트가 없습니다: 이 반복에 All-Reduce한 원소가 0개입니다. "
                         + BEFORE_ACCUMULATION, AFTER_ACCUMULATION),
    "tensor_hook": ("register_hook으로 건 텐서 훅이 받은 그래디언트를 All-Reduce했지만, autograd가 p.grad에 쌓는 것은 그 사본이라 평균이 "
                    "p.grad에 닿지 않았습니다. 훅은 그래디언트가 p.grad에 쌓이기 전에 불립니다.", AFTER_ACCUMULATION),
    "not_divided": ("p.grad가 평균의 N배입니다: All-Reduce는 합만 구하는데 N으로 나누지 않았습니다(SGD의 스텝이 N배).",
                    "finish_gradient_synchronization(): 기다린 뒤 p.grad를 world_size로 나누기"),
    "divided_twice": ("p.grad가 평균을 한 번 더 N으로 나눈 값입니다: 두 번 나눴습니다(보내기 전에 한 번, 받은 뒤에 한 번 등).",
                      "나누기는 합을 받은 뒤 한 번만"),
    "stale_handles": ("첫 반복은 맞고 그 뒤 반복에서 p.grad가 평균의 1/N^k입니다: 지난 반복의 핸들 목록을 비우지 않아 finish가 예전 "
                      "항목까지 다시 나눕니다.", "finish_gradient_synchronization() 끝에서 핸들 목록을 비우세요(self.pending.clear())"),
    "stale": ("p.grad가 지난 반복의 평균 그래디언트입니다: 버킷 버퍼에 이번 그래디언트를 복사하지 않았거나, 지난 반복의 결과를 되돌려 "
              "썼습니다.", "훅에서 이번 p.grad를 버퍼에 복사하고, 기다린 뒤 버퍼에서 p.grad로 되돌려 쓰세요"),
    "wrong_op": ("p.grad가 랭크들의 그래디언트를 원소마다 {op}로 모은 값(또는 그것을 N으로 나눈 값)입니다: All-Reduce의 op가 합(SUM)이 "
                 "아닙니다. 평균은 합을 N으로 나눈 것입니다.", "dist.all_reduce(tensor)의 op를 기본값 dist.ReduceOp.SUM으로 두고, 받은 "
                 "뒤 N으로 나누세요"),
    "wrong": ("p.grad가 평균 그래디언트와 다르고, 알려진 어느 모양(N배, 1/N, 이 랭크 것, 지난 반복)과도 맞지 않습니다.", "버퍼의 어느 "
              "조각이 어느 파라미터인지(순서, view 모양)를 확인하세요"),
}
# 한 스텝이 쓴 그래디언트가 무엇이었는지(labs.grading.fsdp_judge.grad_cause)
FSDP_CAUSES = {
    "sum_not_average": ("한 스텝이 쓴 그래디언트가 평균의 N배입니다: Reduce-Scatter(또는 All-Reduce)는 합만 구하는데 N으로 나누지 "
                        "않았습니다.", "Reduce-Scatter한 조각을 world_size로 나눈 뒤 샤드의 .grad로(gloo에는 AVG가 없습니다)"),
    "divided_twice": ("한 스텝이 쓴 그래디언트가 평균을 한 번 더 N으로 나눈 값입니다: 두 번 나눴습니다.", "나누기는 합을 받은 뒤 한 번만"),
    "not_reduced": ("한 스텝이 쓴 그래디언트가 이 랭크 자신의 것 그대로입니다: 랭크끼리 그래디언트를 모으지 않았습니다.", "가중치의 "
                    "그래디언트는 Reduce-Scatter로, 나머지 파라미터는 finish_gradient_synchronization()에서 All-Reduce로"),
    "wrong": ("한 스텝이 쓴 그래디언트가 평균과 다르고, 알려진 어느 모양(N배, 1/N, 이 랭크 것)과도 맞지 않습니다.", "Reduce-Scatter한 "
              "조각이 내 샤드의 자리(rank × 샤드 크기부터)와 맞는지, 패딩을 어디에 두었는지 보세요"),
}
CAUSES = {
    "ddp": {
        "grads_averaged": GRAD_CAUSES,
        "runs_without_error": {"hook_before_grad": ("훅이 p.grad를 읽었지만 아직 None이었습니다: " + BEFORE_ACCUMULATION,
                                                    AFTER_ACCUMULATION)},
        "handles_waited": {
            "dropped": ("반복 {iteration}의 finish_gradient_synchronization()이 All-Reduce의 작업(Work) {count}개를 기다리지 않고 "
                        "버렸습니다({line}). torch는 작업이 끝나는 순서를 약속하지 않으므로 작업마다 wait()를 불러야 그 합이 p.grad에 "
                        "도착했다고 보장됩니다: 마지막 작업만 기다리면 앞의 것이 끝났는지는 백엔드와 타이밍에 달립니다.",
                        "finish_gradient_synchronization(): 목록을 비우기 전에 모든 작업에 .wait()를 부르세요"),
            "held": ("finish_gradient_synchronization()이 돌아올 때 기다리지 않은 All-Reduce의 작업(Work)이 {count}개 남아 있습니다: 그 "
                     "합이 언제 p.grad에 도착할지 모르는 채로 옵티마이저가 p.grad를 씁니다.", "finish_gradient_synchronization(): "
                     "돌아오기 전에 모든 작업에 .wait()를 부르세요")}},
    "zero": {"state_divided": {
        "replicated": ("옵티마이저 상태가 1/N로 줄지 않았습니다: 랭크들이 가진 상태를 모두 더하면 한 프로세스의 {total}배입니다. 여러 "
                       "랭크가 같은 파라미터를 업데이트해 그 상태(모멘텀, Adam의 두 모멘트)를 함께 가집니다(모든 랭크가 모든 파라미터를 "
                       "업데이트하면 N배). 결과는 맞아도 ZeRO-1이 아낄 메모리가 그대로입니다.", "__init__: optimizer_cls에는 이 랭크가 "
                       "맡은 파라미터만 넘기세요(배정에서 주인이 나인 것)"),
        "unbalanced": ("상태는 나뉘었지만(모든 랭크의 상태를 더하면 한 프로세스의 것과 같습니다) 고르지 않습니다: 랭크 {rank}의 상태가 "
                       "한 프로세스 상태의 {share}입니다. 인덱스 순서로 돌아가며(round-robin) 나누면 큰 가중치가 한 랭크에 "
                       "몰리고(가중치·편향이 번갈아 오는 모델에서 N=2면 가중치가 모두 랭크 0에), 그 랭크의 메모리는 거의 줄지 않습니다.",
                       "배정을 크기로 하세요: 가장 큰 텐서부터, 지금까지 맡은 원소가 가장 적은 랭크에게(labs/ddp/zero.py의 "
                       "assign_to_ranks). 모든 랭크가 같은 크기 목록으로 같은 답을 얻으므로 통신이 필요 없습니다"),
        "not_found": ("어느 랭크에서도 옵티마이저 상태를 찾지 못했습니다: 상태가 optimizer_cls로 만든 torch 옵티마이저의 state에 있지 "
                      "않습니다.", "__init__: 내 샤드의 파라미터로 optimizer_cls(...)를 만들어 속성에 두고, step()에서 그 옵티마이저의 "
                      "step()을 부르세요")}},
    "fsdp": {"grads_averaged": FSDP_CAUSES},
}

# 인터페이스마다(labs.grading.source.kind_of) 확인의 설명: 예외는 어느 인터페이스든 같은 말로
HINTS_OF = {"ddp": HINTS, "zero": {"runs_without_error": HINTS["runs_without_error"], **ZERO_HINTS},
            "fsdp": {"runs_without_error": HINTS["runs_without_error"], **FSDP_HINTS}}
