"""Min and sorted values per (threads, shape, rows) of two trees' lines (base, main) in FILE: python ab_stat.py FILE"""
import collections, sys
allv=collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts=line.split(); tree, th = parts[0], parts[1]; toks=parts[2:]
    for j in range(0,len(toks),2):
        shape=toks[j]; m,v=toks[j+1].split(':'); allv[(tree,th,shape,m)].append(int(v))
for k in sorted({k[1:] for k in allv}, key=lambda k:(k[0],k[1],int(k[2][1:]))):
    b=allv[('base',)+k]; m=allv[('main',)+k]
    print(k, 'base', sorted(b), 'main', sorted(m), f"{min(b)/min(m):.2f}x")
