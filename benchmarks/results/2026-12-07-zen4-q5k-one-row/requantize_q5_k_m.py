# usage: python requantize_q5_k_m.py SOURCE.gguf OUT.gguf: llama.cpp's quantizer (llama-cpp-python) to Q5_K_M
import sys, time, ctypes, llama_cpp
src, dst = sys.argv[1].encode(), sys.argv[2].encode()
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M
params.allow_requantize = True
params.nthread = 2
t = time.time()
rc = llama_cpp.llama_model_quantize(src, dst, ctypes.byref(params))
print("rc", rc, "s", round(time.time() - t, 1))
