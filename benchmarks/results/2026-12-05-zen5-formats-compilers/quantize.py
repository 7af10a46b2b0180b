"""Quantize a GGUF with llama.cpp's own quantizer (llama-cpp-python): python quantize.py SRC.gguf DST.gguf Q3_K_M"""
import ctypes, sys, llama_cpp
src, dst, kind = sys.argv[1], sys.argv[2], sys.argv[3]
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind}")
p.allow_requantize = True
p.nthread = 2
rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
print("rc", rc)
