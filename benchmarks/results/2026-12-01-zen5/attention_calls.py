"""One attention call, two heads at once against one at a time: the same bits asserted over shapes, chunkings and
splits, then the time of both at model shapes (2 threads, min of 300). Usage: python attention_calls.py"""
import torch, time
from multidraft.models import gguf_kernels as g
print(g.load(), g.isa())
gen = torch.Generator().manual_seed(3)
ok = True
for heads, kv, rows, keys, dim in ((12,2,3,150,128),(9,3,2,301,64),(4,1,2,77,256),(6,3,3,70,36),(8,2,1,9,80),(14,2,5,33,72),(2,1,1,5,64)):
    q=torch.randn(heads,rows,dim,generator=gen); k=torch.randn(kv,keys,dim,generator=gen); v=torch.randn(kv,keys,dim,generator=gen)
    vis=torch.rand(rows,keys,generator=gen)<0.8
    outs=[]
    for wide in (False, True):
        torch.ops.multidraft_gguf.set_attention_wide(wide)
        outs.append([g.attention(q,k,v,vis,0.09)] + [g.attention_with(q,k,v,vis,0.09,c,p) for c,p in ((4,1),(8,2),(32,1),(12,3))])
    same = all(torch.equal(a.view(torch.int32), b.view(torch.int32)) for a in outs[0] for b in outs[1])
    print(heads,kv,rows,keys,dim,same); ok &= same
torch.ops.multidraft_gguf.set_attention_wide(True)
torch.set_num_threads(2)
def t(fn, reps=300):
    for _ in range(20): fn()
    best=1e9
    for _ in range(reps):
        a=time.perf_counter(); fn(); best=min(best, time.perf_counter()-a)
    return best*1e6
for (H,KVH,D,S,T) in ((12,2,128,1000,1),(12,2,128,1000,8),(9,3,64,300,1),(9,3,64,1000,8),(4,1,256,1000,1)):
    q=torch.randn(H,T,D); k=torch.randn(KVH,S,D); v=torch.randn(KVH,S,D); vis=torch.ones(T,S,dtype=torch.bool)
    r=[]
    for wide in (False, True):
        torch.ops.multidraft_gguf.set_attention_wide(wide); r.append(t(lambda: g.attention(q,k,v,vis,0.125)))
    print(H,KVH,D,S,T,"narrow %.1f wide %.1f us (%.2fx)" % (r[0], r[1], r[0]/r[1]))
print("ALL SAME", ok)
