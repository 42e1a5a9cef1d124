from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DecodingMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECODING_MODE_UNSPECIFIED: _ClassVar[DecodingMode]
    DECODING_MODE_GREEDY: _ClassVar[DecodingMode]
    DECODING_MODE_BEAM_SEARCH: _ClassVar[DecodingMode]
    DECODING_MODE_SAMPLING: _ClassVar[DecodingMode]

class TextFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEXT_FORMAT_TEXT: _ClassVar[TextFormat]
    TEXT_FORMAT_HTML: _ClassVar[TextFormat]
    TEXT_FORMAT_MARKDOWN: _ClassVar[TextFormat]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_EOS: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]

class FileJobStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_JOB_STATUS_UNSPECIFIED: _ClassVar[FileJobStatus]
    FILE_JOB_STATUS_QUEUED: _ClassVar[FileJobStatus]
    FILE_JOB_STATUS_RUNNING: _ClassVar[FileJobStatus]
    FILE_JOB_STATUS_DONE: _ClassVar[FileJobStatus]
    FILE_JOB_STATUS_FAILED: _ClassVar[FileJobStatus]
    FILE_JOB_STATUS_CANCELLED: _ClassVar[FileJobStatus]

class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATA_TYPE_UNSPECIFIED: _ClassVar[DataType]
    DATA_TYPE_FP32: _ClassVar[DataType]
    DATA_TYPE_FP16: _ClassVar[DataType]
    DATA_TYPE_UINT8: _ClassVar[DataType]

class ModelKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_KIND_UNSPECIFIED: _ClassVar[ModelKind]
    MODEL_KIND_TRANSLATION: _ClassVar[ModelKind]
    MODEL_KIND_IMAGE_CLASSIFICATION: _ClassVar[ModelKind]
DECODING_MODE_UNSPECIFIED: DecodingMode
DECODING_MODE_GREEDY: DecodingMode
DECODING_MODE_BEAM_SEARCH: DecodingMode
DECODING_MODE_SAMPLING: DecodingMode
TEXT_FORMAT_TEXT: TextFormat
TEXT_FORMAT_HTML: TextFormat
TEXT_FORMAT_MARKDOWN: TextFormat
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_EOS: FinishReason
FINISH_REASON_LENGTH: FinishReason
FILE_JOB_STATUS_UNSPECIFIED: FileJobStatus
FILE_JOB_STATUS_QUEUED: FileJobStatus
FILE_JOB_STATUS_RUNNING: FileJobStatus
FILE_JOB_STATUS_DONE: FileJobStatus
FILE_JOB_STATUS_FAILED: FileJobStatus
FILE_JOB_STATUS_CANCELLED: FileJobStatus
DATA_TYPE_UNSPECIFIED: DataType
DATA_TYPE_FP32: DataType
DATA_TYPE_FP16: DataType
DATA_TYPE_UINT8: DataType
MODEL_KIND_UNSPECIFIED: ModelKind
MODEL_KIND_TRANSLATION: ModelKind
MODEL_KIND_IMAGE_CLASSIFICATION: ModelKind

class DecodingOptions(_message.Message):
    __slots__ = ("mode", "beam_size", "num_hypotheses", "length_penalty", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "return_scores", "return_token_ids", "source_language", "target_language", "target_prefix")
    MODE_FIELD_NUMBER: _ClassVar[int]
    BEAM_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_HYPOTHESES_FIELD_NUMBER: _ClassVar[int]
    LENGTH_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    RETURN_SCORES_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_PREFIX_FIELD_NUMBER: _ClassVar[int]
    mode: DecodingMode
    beam_size: int
    num_hypotheses: int
    length_penalty: float
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int
    return_scores: bool
    return_token_ids: bool
    source_language: str
    target_language: str
    target_prefix: str
    def __init__(self, mode: _Optional[_Union[DecodingMode, str]] = ..., beam_size: _Optional[int] = ..., num_hypotheses: _Optional[int] = ..., length_penalty: _Optional[float] = ..., max_new_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ..., seed: _Optional[int] = ..., return_scores: bool = ..., return_token_ids: bool = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., target_prefix: _Optional[str] = ...) -> None: ...

class GlossaryEntry(_message.Message):
    __slots__ = ("source", "target")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ...) -> None: ...

class TranslateRequest(_message.Message):
    __slots__ = ("model", "texts", "options", "format", "glossary", "keep", "return_alignments", "return_quality", "glossary_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    GLOSSARY_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    RETURN_ALIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    RETURN_QUALITY_FIELD_NUMBER: _ClassVar[int]
    GLOSSARY_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    options: DecodingOptions
    format: TextFormat
    glossary: _containers.RepeatedCompositeFieldContainer[GlossaryEntry]
    keep: _containers.RepeatedScalarFieldContainer[str]
    return_alignments: bool
    return_quality: bool
    glossary_id: str
    def __init__(self, model: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., options: _Optional[_Union[DecodingOptions, _Mapping]] = ..., format: _Optional[_Union[TextFormat, str]] = ..., glossary: _Optional[_Iterable[_Union[GlossaryEntry, _Mapping]]] = ..., keep: _Optional[_Iterable[str]] = ..., return_alignments: bool = ..., return_quality: bool = ..., glossary_id: _Optional[str] = ...) -> None: ...

class Hypothesis(_message.Message):
    __slots__ = ("text", "token_ids", "score", "logprob", "finish_reason", "alignments")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    score: float
    logprob: float
    finish_reason: FinishReason
    alignments: _containers.RepeatedCompositeFieldContainer[SentenceAlignment]
    def __init__(self, text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., score: _Optional[float] = ..., logprob: _Optional[float] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., alignments: _Optional[_Iterable[_Union[SentenceAlignment, _Mapping]]] = ...) -> None: ...

class WordLink(_message.Message):
    __slots__ = ("source_word", "target_word", "source_start", "source_end", "target_start", "target_end")
    SOURCE_WORD_FIELD_NUMBER: _ClassVar[int]
    TARGET_WORD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_START_FIELD_NUMBER: _ClassVar[int]
    SOURCE_END_FIELD_NUMBER: _ClassVar[int]
    TARGET_START_FIELD_NUMBER: _ClassVar[int]
    TARGET_END_FIELD_NUMBER: _ClassVar[int]
    source_word: int
    target_word: int
    source_start: int
    source_end: int
    target_start: int
    target_end: int
    def __init__(self, source_word: _Optional[int] = ..., target_word: _Optional[int] = ..., source_start: _Optional[int] = ..., source_end: _Optional[int] = ..., target_start: _Optional[int] = ..., target_end: _Optional[int] = ...) -> None: ...

class SentenceAlignment(_message.Message):
    __slots__ = ("source", "target", "links", "attention", "source_words", "target_words")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_WORDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_WORDS_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    links: _containers.RepeatedCompositeFieldContainer[WordLink]
    attention: _containers.RepeatedScalarFieldContainer[float]
    source_words: int
    target_words: int
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ..., links: _Optional[_Iterable[_Union[WordLink, _Mapping]]] = ..., attention: _Optional[_Iterable[float]] = ..., source_words: _Optional[int] = ..., target_words: _Optional[int] = ...) -> None: ...

class TranslationTiming(_message.Message):
    __slots__ = ("queue_ms", "encode_ms", "decode_ms", "first_token_ms")
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    ENCODE_MS_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_MS_FIELD_NUMBER: _ClassVar[int]
    queue_ms: float
    encode_ms: float
    decode_ms: float
    first_token_ms: float
    def __init__(self, queue_ms: _Optional[float] = ..., encode_ms: _Optional[float] = ..., decode_ms: _Optional[float] = ..., first_token_ms: _Optional[float] = ...) -> None: ...

class Translation(_message.Message):
    __slots__ = ("hypotheses", "source_tokens", "timing", "quality")
    HYPOTHESES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    hypotheses: _containers.RepeatedCompositeFieldContainer[Hypothesis]
    source_tokens: int
    timing: TranslationTiming
    quality: TranslationQuality
    def __init__(self, hypotheses: _Optional[_Iterable[_Union[Hypothesis, _Mapping]]] = ..., source_tokens: _Optional[int] = ..., timing: _Optional[_Union[TranslationTiming, _Mapping]] = ..., quality: _Optional[_Union[TranslationQuality, _Mapping]] = ...) -> None: ...

class TranslationQuality(_message.Message):
    __slots__ = ("score", "sentences", "low")
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SENTENCES_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    score: float
    sentences: _containers.RepeatedScalarFieldContainer[float]
    low: bool
    def __init__(self, score: _Optional[float] = ..., sentences: _Optional[_Iterable[float]] = ..., low: bool = ...) -> None: ...

class TranslateResponse(_message.Message):
    __slots__ = ("model", "translations", "source_language", "target_language", "pivot_language")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRANSLATIONS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    PIVOT_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    model: str
    translations: _containers.RepeatedCompositeFieldContainer[Translation]
    source_language: str
    target_language: str
    pivot_language: str
    def __init__(self, model: _Optional[str] = ..., translations: _Optional[_Iterable[_Union[Translation, _Mapping]]] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., pivot_language: _Optional[str] = ...) -> None: ...

class TranslateChunk(_message.Message):
    __slots__ = ("delta", "token_ids", "finish_reason", "pivot_language")
    DELTA_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PIVOT_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    delta: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: FinishReason
    pivot_language: str
    def __init__(self, delta: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., pivot_language: _Optional[str] = ...) -> None: ...

class TranslateFileRequest(_message.Message):
    __slots__ = ("model", "filename", "content", "source_language", "target_language", "glossary_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    GLOSSARY_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    filename: str
    content: bytes
    source_language: str
    target_language: str
    glossary_id: str
    def __init__(self, model: _Optional[str] = ..., filename: _Optional[str] = ..., content: _Optional[bytes] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., glossary_id: _Optional[str] = ...) -> None: ...

class FileProgress(_message.Message):
    __slots__ = ("sentences_done", "sentences_total")
    SENTENCES_DONE_FIELD_NUMBER: _ClassVar[int]
    SENTENCES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    sentences_done: int
    sentences_total: int
    def __init__(self, sentences_done: _Optional[int] = ..., sentences_total: _Optional[int] = ...) -> None: ...

class FileDone(_message.Message):
    __slots__ = ("model", "filename", "media_type", "size_bytes", "characters", "sentences", "source_language", "target_language", "detected_language")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHARACTERS_FIELD_NUMBER: _ClassVar[int]
    SENTENCES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    DETECTED_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    model: str
    filename: str
    media_type: str
    size_bytes: int
    characters: int
    sentences: int
    source_language: str
    target_language: str
    detected_language: str
    def __init__(self, model: _Optional[str] = ..., filename: _Optional[str] = ..., media_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., characters: _Optional[int] = ..., sentences: _Optional[int] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., detected_language: _Optional[str] = ...) -> None: ...

class TranslateFileChunk(_message.Message):
    __slots__ = ("progress", "content", "done")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    progress: FileProgress
    content: bytes
    done: FileDone
    def __init__(self, progress: _Optional[_Union[FileProgress, _Mapping]] = ..., content: _Optional[bytes] = ..., done: _Optional[_Union[FileDone, _Mapping]] = ...) -> None: ...

class FileJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class FileJob(_message.Message):
    __slots__ = ("id", "status", "filename", "progress", "remaining_seconds", "error", "sentences_reused", "sentences_decoded", "created_unix", "expires_unix")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    REMAINING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SENTENCES_REUSED_FIELD_NUMBER: _ClassVar[int]
    SENTENCES_DECODED_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: FileJobStatus
    filename: str
    progress: FileProgress
    remaining_seconds: float
    error: str
    sentences_reused: int
    sentences_decoded: int
    created_unix: float
    expires_unix: float
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[FileJobStatus, str]] = ..., filename: _Optional[str] = ..., progress: _Optional[_Union[FileProgress, _Mapping]] = ..., remaining_seconds: _Optional[float] = ..., error: _Optional[str] = ..., sentences_reused: _Optional[int] = ..., sentences_decoded: _Optional[int] = ..., created_unix: _Optional[float] = ..., expires_unix: _Optional[float] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("shape", "datatype", "raw_contents")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATATYPE_FIELD_NUMBER: _ClassVar[int]
    RAW_CONTENTS_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    datatype: DataType
    raw_contents: bytes
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., datatype: _Optional[_Union[DataType, str]] = ..., raw_contents: _Optional[bytes] = ...) -> None: ...

class ImageInput(_message.Message):
    __slots__ = ("encoded", "tensor")
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    encoded: bytes
    tensor: Tensor
    def __init__(self, encoded: _Optional[bytes] = ..., tensor: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("model", "images", "top_k")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    model: str
    images: _containers.RepeatedCompositeFieldContainer[ImageInput]
    top_k: int
    def __init__(self, model: _Optional[str] = ..., images: _Optional[_Iterable[_Union[ImageInput, _Mapping]]] = ..., top_k: _Optional[int] = ...) -> None: ...

class LabelScore(_message.Message):
    __slots__ = ("label", "index", "probability")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    label: str
    index: int
    probability: float
    def __init__(self, label: _Optional[str] = ..., index: _Optional[int] = ..., probability: _Optional[float] = ...) -> None: ...

class ClassificationTiming(_message.Message):
    __slots__ = ("preprocess_ms", "queue_ms", "inference_ms")
    PREPROCESS_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_MS_FIELD_NUMBER: _ClassVar[int]
    preprocess_ms: float
    queue_ms: float
    inference_ms: float
    def __init__(self, preprocess_ms: _Optional[float] = ..., queue_ms: _Optional[float] = ..., inference_ms: _Optional[float] = ...) -> None: ...

class Classification(_message.Message):
    __slots__ = ("labels", "batch_size", "timing")
    LABELS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedCompositeFieldContainer[LabelScore]
    batch_size: int
    timing: ClassificationTiming
    def __init__(self, labels: _Optional[_Iterable[_Union[LabelScore, _Mapping]]] = ..., batch_size: _Optional[int] = ..., timing: _Optional[_Union[ClassificationTiming, _Mapping]] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("model", "results")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[Classification]
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[Classification, _Mapping]]] = ...) -> None: ...

class ModelLimits(_message.Message):
    __slots__ = ("max_source_len", "max_target_len", "max_beam_size", "max_items_per_request", "max_batch_size", "max_queue_size", "max_image_bytes", "max_image_pixels", "max_text_chars", "max_request_chars")
    MAX_SOURCE_LEN_FIELD_NUMBER: _ClassVar[int]
    MAX_TARGET_LEN_FIELD_NUMBER: _ClassVar[int]
    MAX_BEAM_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_ITEMS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_IMAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_IMAGE_PIXELS_FIELD_NUMBER: _ClassVar[int]
    MAX_TEXT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_CHARS_FIELD_NUMBER: _ClassVar[int]
    max_source_len: int
    max_target_len: int
    max_beam_size: int
    max_items_per_request: int
    max_batch_size: int
    max_queue_size: int
    max_image_bytes: int
    max_image_pixels: int
    max_text_chars: int
    max_request_chars: int
    def __init__(self, max_source_len: _Optional[int] = ..., max_target_len: _Optional[int] = ..., max_beam_size: _Optional[int] = ..., max_items_per_request: _Optional[int] = ..., max_batch_size: _Optional[int] = ..., max_queue_size: _Optional[int] = ..., max_image_bytes: _Optional[int] = ..., max_image_pixels: _Optional[int] = ..., max_text_chars: _Optional[int] = ..., max_request_chars: _Optional[int] = ...) -> None: ...

class ImagePreprocessing(_message.Message):
    __slots__ = ("image_size", "channels", "mean", "std", "resample", "invert")
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    RESAMPLE_FIELD_NUMBER: _ClassVar[int]
    INVERT_FIELD_NUMBER: _ClassVar[int]
    image_size: int
    channels: int
    mean: _containers.RepeatedScalarFieldContainer[float]
    std: _containers.RepeatedScalarFieldContainer[float]
    resample: str
    invert: bool
    def __init__(self, image_size: _Optional[int] = ..., channels: _Optional[int] = ..., mean: _Optional[_Iterable[float]] = ..., std: _Optional[_Iterable[float]] = ..., resample: _Optional[str] = ..., invert: bool = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "kind", "ready", "error", "provider", "precision", "attention", "config", "labels", "limits", "preprocessing", "version", "domain", "source_languages", "target_languages", "family", "loaded")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PREPROCESSING_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: ModelKind
    ready: bool
    error: str
    provider: str
    precision: str
    attention: str
    config: _containers.ScalarMap[str, str]
    labels: _containers.RepeatedScalarFieldContainer[str]
    limits: ModelLimits
    preprocessing: ImagePreprocessing
    version: str
    domain: str
    source_languages: _containers.RepeatedScalarFieldContainer[str]
    target_languages: _containers.RepeatedScalarFieldContainer[str]
    family: str
    loaded: bool
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[ModelKind, str]] = ..., ready: bool = ..., error: _Optional[str] = ..., provider: _Optional[str] = ..., precision: _Optional[str] = ..., attention: _Optional[str] = ..., config: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Iterable[str]] = ..., limits: _Optional[_Union[ModelLimits, _Mapping]] = ..., preprocessing: _Optional[_Union[ImagePreprocessing, _Mapping]] = ..., version: _Optional[str] = ..., domain: _Optional[str] = ..., source_languages: _Optional[_Iterable[str]] = ..., target_languages: _Optional[_Iterable[str]] = ..., family: _Optional[str] = ..., loaded: bool = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "routes")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    routes: _containers.RepeatedCompositeFieldContainer[LanguageRoute]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., routes: _Optional[_Iterable[_Union[LanguageRoute, _Mapping]]] = ...) -> None: ...

class LanguageRoute(_message.Message):
    __slots__ = ("source", "target", "models", "pivot_language")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    PIVOT_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    models: _containers.RepeatedScalarFieldContainer[str]
    pivot_language: str
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ..., models: _Optional[_Iterable[str]] = ..., pivot_language: _Optional[str] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateGlossaryRequest(_message.Message):
    __slots__ = ("name", "source_language", "target_language", "entries")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    source_language: str
    target_language: str
    entries: _containers.RepeatedCompositeFieldContainer[GlossaryEntry]
    def __init__(self, name: _Optional[str] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[GlossaryEntry, _Mapping]]] = ...) -> None: ...

class StoredGlossary(_message.Message):
    __slots__ = ("id", "name", "source_language", "target_language", "entry_count", "created_unix_s", "entries")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    source_language: str
    target_language: str
    entry_count: int
    created_unix_s: float
    entries: _containers.RepeatedCompositeFieldContainer[GlossaryEntry]
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., entry_count: _Optional[int] = ..., created_unix_s: _Optional[float] = ..., entries: _Optional[_Iterable[_Union[GlossaryEntry, _Mapping]]] = ...) -> None: ...

class ListGlossariesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGlossariesResponse(_message.Message):
    __slots__ = ("glossaries",)
    GLOSSARIES_FIELD_NUMBER: _ClassVar[int]
    glossaries: _containers.RepeatedCompositeFieldContainer[StoredGlossary]
    def __init__(self, glossaries: _Optional[_Iterable[_Union[StoredGlossary, _Mapping]]] = ...) -> None: ...

class GlossaryRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteGlossaryResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
