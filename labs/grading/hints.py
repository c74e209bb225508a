"""The report's words for the chapter 13 interfaces (the DDP's are :data:`labs.grader.HINTS`).

For each check: what it looks at, the most likely cause when it fails, and where to fix it.
"""

from __future__ import annotations

ZERO_HINTS = {
    "same_collectives_on_ranks": ("모든 랭크가 같은 집합 통신을 같은 순서로",
                                  "랭크마다 step()에서 부르는 집합 통신이 다릅니다(자기 몫의 파라미터만 broadcast하거나, "
                                  "랭크마다 다른 순서로 보냄). 모든 랭크가 모든 파라미터의 broadcast(또는 all_gather)에 "
                                  "같은 순서로 참여해야 합니다: 받는 랭크도 같은 호출을 합니다.",
                                  "step()의 나누기: 모든 파라미터를 같은 순서로 돌며, 주인 랭크를 src로 dist.broadcast"),
    "step_shares_params": ("step()이 업데이트한 파라미터를 모두에게 나누기",
                           "step()이 자기 샤드만 업데이트하고 나누지 않습니다: 집합 통신이 없거나 파라미터의 일부만 "
                           "보냅니다. 다른 랭크는 그 파라미터의 옛 값을 그대로 씁니다.",
                           "step(): 로컬 옵티마이저의 step() 뒤 파라미터마다 dist.broadcast(p.data, src=주인 랭크) "
                           "(또는 샤드를 dist.all_gather)"),
    "replicas_identical": ("스텝 뒤 모든 랭크의 파라미터가 같음",
                           "스텝 뒤 랭크마다 파라미터가 다릅니다: 어떤 파라미터는 주인 랭크에서만 업데이트되고 다른 "
                           "랭크에 닿지 않았습니다.",
                           "step(): 모든 파라미터를 주인에게서 받으세요(빠진 파라미터가 없는지, 새로 더한 그룹도)"),
    "params_updated": ("첫 스텝 뒤 모든 파라미터가 DDP와 같음",
                       "첫 step() 뒤 위에 나온 파라미터가 DDP와 다릅니다. 모든 랭크가 같은 값인데 스텝 전 값 그대로라면 "
                       "그 파라미터를 업데이트한 주인이 아닌 랭크(예: 언제나 랭크 0)에서 broadcast해 옛 값으로 덮어썼습니다.",
                       "step(): dist.broadcast의 src는 그 파라미터를 업데이트한 주인 랭크(모든 랭크가 같은 규칙으로 "
                       "계산한 배정)"),
    "state_divided": ("옵티마이저 상태가 랭크마다 약 1/N",
                      "옵티마이저 상태가 1/N로 줄지 않았습니다: 모든 랭크가 모든 파라미터를 업데이트해 모든 파라미터의 "
                      "상태(모멘텀, Adam의 두 모멘트)를 가집니다. 결과는 맞아도 ZeRO-1이 아낄 메모리가 그대로입니다.",
                      "__init__: optimizer_cls에는 이 랭크가 맡은 파라미터만 넘기세요(배정에서 주인이 나인 것)"),
    "zero_grad_clears": ("zero_grad()가 모든 그래디언트를 지움",
                         "zero_grad() 뒤에도 그래디언트가 남은 파라미터가 있습니다: param_groups에 내 샤드만 넣어, "
                         "torch.optim.Optimizer.zero_grad()가 나머지 파라미터를 보지 못합니다. 다음 역전파에서 그래디언트가 "
                         "쌓입니다.",
                         "__init__: super().__init__(params, defaults)에 모든 파라미터를 넘겨 param_groups가 전체를 담게 "
                         "하고, 샤드는 따로 둔 옵티마이저에만"),
    "param_groups_honoured": ("add_param_group으로 더한 그룹과 그 lr",
                              "생성한 뒤 add_param_group으로 더한 그룹이 무시되거나 그 lr이 쓰이지 않았습니다: param_groups에는 "
                              "들어갔지만 샤드의 옵티마이저에는 넘어가지 않았거나, 생성자의 lr로 업데이트됩니다.",
                              "add_param_group(group)을 재정의해 super().add_param_group(group) 뒤 새 파라미터에 주인을 "
                              "배정하고, 내 몫을 그 그룹의 하이퍼파라미터(lr 등)와 함께 샤드의 옵티마이저에 더하세요"),
    "matches_oracles": ("torch DDP·단일 프로세스와 같은 결과",
                        "여러 스텝 뒤 파라미터가 torch DDP + 같은 옵티마이저, 전역 배치 단일 프로세스와 다릅니다. 위의 다른 "
                        "실패가 있다면 그것부터 고치세요.",
                        "step(): 샤드의 옵티마이저가 받는 하이퍼파라미터(**kwargs)가 그대로인지, 스텝마다 한 번씩만 "
                        "업데이트하는지"),
}
