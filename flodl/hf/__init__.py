"""``flodl.hf``: HuggingFace encoders as flodl graphs — load, predict, fine-tune, export.

Six BERT-family architectures (BERT, RoBERTa, DistilBERT, ALBERT, XLM-RoBERTa, DeBERTa-v2)
with five heads
each (the bare encoder, sequence and token classification, extractive QA, masked LM), loaded from
a HuggingFace directory or hub id into an ``fl.Graph`` with the same weights and outputs as
``transformers``::

    import flodl as fl
    import flodl.hf

    model = fl.hf.AutoModelForSequenceClassification.from_pretrained("path/or/hub-id")
    model.freeze("embeddings")
    model.predict(["a text"], top_k=2)
    model.save_pretrained("out/")

Needs the ``hf`` extra (``pip install 'flodl[hf]'``: safetensors, huggingface_hub, tokenizers);
``transformers`` is never imported. See docs/hf.md.
"""

from flodl.hf.errors import (
    HfConfigError,
    HfError,
    HfHubError,
    TokenizerError,
    WeightsError,
)
from flodl.hf.families import FAMILIES, HEADS
from flodl.hf.model import (
    AlbertForMaskedLM,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
    AlbertModel,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    DebertaV2ForMaskedLM,
    DebertaV2ForQuestionAnswering,
    DebertaV2ForSequenceClassification,
    DebertaV2ForTokenClassification,
    DebertaV2Model,
    DistilBertForMaskedLM,
    DistilBertForQuestionAnswering,
    DistilBertForSequenceClassification,
    DistilBertForTokenClassification,
    DistilBertModel,
    HfModel,
    RobertaForMaskedLM,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaModel,
    XLMRobertaForMaskedLM,
    XLMRobertaForQuestionAnswering,
    XLMRobertaForSequenceClassification,
    XLMRobertaForTokenClassification,
    XLMRobertaModel,
    model_class,
)
from flodl.hf.tokenizer import Encoding, HfTokenizer
from flodl.hf.weights import LoadReport

__all__ = [
    "FAMILIES",
    "HEADS",
    "AlbertForMaskedLM",
    "AlbertForQuestionAnswering",
    "AlbertForSequenceClassification",
    "AlbertForTokenClassification",
    "AlbertModel",
    "AutoModel",
    "AutoModelForMaskedLM",
    "AutoModelForQuestionAnswering",
    "AutoModelForSequenceClassification",
    "AutoModelForTokenClassification",
    "BertForMaskedLM",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "DebertaV2ForMaskedLM",
    "DebertaV2ForQuestionAnswering",
    "DebertaV2ForSequenceClassification",
    "DebertaV2ForTokenClassification",
    "DebertaV2Model",
    "DistilBertForMaskedLM",
    "DistilBertForQuestionAnswering",
    "DistilBertForSequenceClassification",
    "DistilBertForTokenClassification",
    "DistilBertModel",
    "Encoding",
    "HfConfigError",
    "HfError",
    "HfHubError",
    "HfModel",
    "HfTokenizer",
    "LoadReport",
    "RobertaForMaskedLM",
    "RobertaForQuestionAnswering",
    "RobertaForSequenceClassification",
    "RobertaForTokenClassification",
    "RobertaModel",
    "TokenizerError",
    "WeightsError",
    "XLMRobertaForMaskedLM",
    "XLMRobertaForQuestionAnswering",
    "XLMRobertaForSequenceClassification",
    "XLMRobertaForTokenClassification",
    "XLMRobertaModel",
    "model_class",
]
