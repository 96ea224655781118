import time, torch
torch.set_num_threads(1)
from grpoctl.tiny.model import build_model, build_tokenizer
from warmstart import SIZES
tok=build_tokenizer(); m=build_model(tok, **SIZES[2]); opt=torch.optim.AdamW(m.parameters(), lr=1e-3)
x=torch.randint(2,200,(128,62))
for i in range(6):
    if i==1: t=time.process_time()
    logits=m(x).logits; loss=torch.nn.functional.cross_entropy(logits.reshape(-1,logits.shape[-1]), x.reshape(-1)); loss.backward(); opt.step(); opt.zero_grad()
print("128x62 fwd+bwd+adamw", (time.process_time()-t)/5)
