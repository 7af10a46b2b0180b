"""Stand-in for llama_cpp.llama_speculative (see __init__.py)."""


class LlamaPromptLookupDecoding:
    def __init__(self, max_ngram_size=2, num_pred_tokens=10):
        self.max_ngram_size, self.num_pred_tokens = max_ngram_size, num_pred_tokens
