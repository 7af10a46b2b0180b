# usage: python requantize_iq4_xs.py SOURCE.gguf OUT.gguf [TYPE]: llama.cpp's quantizer (llama-cpp-python) to IQ4_XS,
# or to TYPE (llama_cpp's LLAMA_FTYPE_MOSTLY_TYPE: Q2_K made the Q2_K model, Q5_K_M the Q5_K_M one)
import sys, time, ctypes, llama_cpp
src, dst = sys.argv[1].encode(), sys.argv[2].encode()
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + (sys.argv[3] if len(sys.argv) > 3 else "IQ4_XS"))
params.allow_requantize = True
params.nthread = 2
t = time.time()
rc = llama_cpp.llama_model_quantize(src, dst, ctypes.byref(params))
print("rc", rc, "s", round(time.time() - t, 1))
