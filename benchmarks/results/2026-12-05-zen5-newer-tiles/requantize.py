# usage: python requantize.py SOURCE.gguf OUT.gguf FTYPE: llama.cpp's quantizer (llama-cpp-python), FTYPE one of
# llama_cpp's LLAMA_FTYPE_MOSTLY_* names' tails (IQ3_M, IQ3_S, IQ3_XS, ...); no importance matrix
import sys, time, ctypes, llama_cpp
src, dst, ftype = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3]
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + ftype)
params.allow_requantize = True
params.nthread = 2
t = time.time()
rc = llama_cpp.llama_model_quantize(src, dst, ctypes.byref(params))
print("rc", rc, "s", round(time.time() - t, 1))
