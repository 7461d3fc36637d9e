"""The OpenAPI 3.0 document of what `corral serve` answers (the subset of OpenAI's chat
completions API it serves, docs/design.md section 5), served at `/openapi.json`.

Request fields are described as `corral.tools.request` validates them (a body the document
allows may still be refused with a 400 or 422, e.g. a schema outside the subset); every
response, errors included, has the shape written here.
"""

from __future__ import annotations

from corral.tools.request import (
    EFFORT_BUDGETS,
    LOGIT_BIAS_RANGE,
    MAX_JSON_OBJECT_DEPTH,
    MAX_TOOLS,
    STRUCTURED_KEYS,
)

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
        }
    },
}

_TEXT = {"type": "string", "nullable": True}
METADATA = {  # keys of at most 64 characters too (OpenAPI 3.0 cannot say it)
    "type": "object",
    "nullable": True,
    "maxProperties": 16,
    "additionalProperties": {"type": "string", "maxLength": 512},
}
_FUNCTION = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "parameters": {"type": "object"},
        "strict": {"type": "boolean", "nullable": True},
    },
}
_FUNCTION_CALL = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string", "enum": ["function"]},
        "function": {
            "type": "object",
            "required": ["name", "arguments"],
            "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
        },
    },
}
_CUSTOM_CALL = {
    "type": "object",
    "required": ["id", "type", "custom"],
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string", "enum": ["custom"]},
        "custom": {
            "type": "object",
            "required": ["name", "input"],
            "properties": {"name": {"type": "string"}, "input": {"type": "string"}},
        },
    },
}
_CALL = {"oneOf": [_FUNCTION_CALL, _CUSTOM_CALL]}
_CUSTOM = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "format": {
            "oneOf": [
                {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"type": "string", "enum": ["text"]}},
                },
                {
                    "type": "object",
                    "required": ["type", "grammar"],
                    "properties": {
                        "type": {"type": "string", "enum": ["grammar"]},
                        "grammar": {
                            "type": "object",
                            "required": ["syntax", "definition"],
                            "properties": {
                                "syntax": {"type": "string", "enum": ["lark", "regex"]},
                                "definition": {"type": "string"},
                            },
                        },
                    },
                },
            ]
        },
    },
}
_STRUCTURED = {
    "regex": {"type": "string", "nullable": True},
    "grammar": {"type": "string", "nullable": True, "description": "GBNF (with ::=) or Lark"},
    "choice": {"type": "array", "minItems": 1, "items": {"type": "string"}, "nullable": True},
    "json": {"oneOf": [{"type": "object"}, {"type": "string"}], "nullable": True},
}
assert tuple(_STRUCTURED) == STRUCTURED_KEYS
MESSAGE_IN = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": _TEXT,
        "tool_calls": {"type": "array", "items": _CALL},
        "tool_call_id": {"type": "string"},
    },
}
REQUEST = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "minItems": 1, "items": MESSAGE_IN},
        "max_tokens": {"type": "integer", "minimum": 1, "nullable": True},
        "max_completion_tokens": {"type": "integer", "minimum": 1, "nullable": True},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": True},
        "top_p": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 1},
        "seed": {"type": "integer", "nullable": True},
        "stop": {
            "nullable": True,
            "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        },
        "n": {"type": "integer", "minimum": 1, "maximum": 128},
        "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "logprobs": {"type": "boolean", "nullable": True},
        "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": True},
        "jump_forward": {"type": "boolean", "nullable": True},
        "stream": {"type": "boolean", "nullable": True},
        "stream_options": {
            "type": "object",
            "nullable": True,
            "properties": {"include_usage": {"type": "boolean"}},
        },
        "tools": {
            "type": "array",
            "maxItems": MAX_TOOLS,
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["type", "function"],
                        "properties": {
                            "type": {"type": "string", "enum": ["function"]},
                            "function": _FUNCTION,
                        },
                    },
                    {
                        "type": "object",
                        "required": ["type", "custom"],
                        "properties": {
                            "type": {"type": "string", "enum": ["custom"]},
                            "custom": _CUSTOM,
                        },
                    },
                ]
            },
        },
        "tool_choice": {
            "oneOf": [
                {"type": "string", "enum": ["none", "auto", "required"]},
                *(
                    {
                        "type": "object",
                        "required": ["type", kind],
                        "properties": {
                            "type": {"type": "string", "enum": [kind]},
                            kind: {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": {"type": "string"}},
                            },
                        },
                    }
                    for kind in ("function", "custom")
                ),
            ]
        },
        "parallel_tool_calls": {"type": "boolean"},
        "response_format": {
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
                "json_schema": {"type": "object"},
            },
        },
        "structured_outputs": {
            "type": "object",
            "nullable": True,
            "description": "vLLM's extension: exactly one of its keys not null",
            "properties": _STRUCTURED,
        },
        "json_object_depth": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_JSON_OBJECT_DEPTH,
            "nullable": True,
            "description": "corral's extension: how deep a json_object answer nests",
        },
        "allowed_mass": {
            "type": "boolean",
            "nullable": True,
            "description": "corral's extension: report the probability mass each token's mask "
            "allowed (per token in logprobs, per choice its min and mean)",
        },
        "reasoning_effort": {
            "type": "string",
            "enum": list(EFFORT_BUDGETS),
            "nullable": True,
            "description": "a thinking format's thought budget in tokens: "
            + ", ".join(f"{k} {v}" for k, v in EFFORT_BUDGETS.items())
            + " ('none' turns thinking off)",
        },
        "thinking_token_budget": {
            "type": "integer",
            "minimum": 0,
            "nullable": True,
            "description": "vLLM's extension: the most tokens a thinking format's thought may "
            "take, its markup included (0: thinking off); not with reasoning_effort",
        },
        "logit_bias": {
            "type": "object",
            "nullable": True,
            "description": "token id (decimal) -> bias",
            "additionalProperties": {
                "type": "number",
                "minimum": -LOGIT_BIAS_RANGE,
                "maximum": LOGIT_BIAS_RANGE,
            },
        },
        # accepted, no effect on the answer
        "user": {"type": "string"},
        "safety_identifier": {"type": "string", "maxLength": 64},
        "prompt_cache_key": {"type": "string"},
        "store": {"type": "boolean", "enum": [False], "nullable": True},
        "metadata": METADATA,
    },
}
_USAGE = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {
        "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "total_tokens": {"type": "integer"},
        "prompt_tokens_details": {
            "type": "object",
            "properties": {"cached_tokens": {"type": "integer"}},
        },
        "completion_tokens_details": {
            "type": "object",
            "properties": {"reasoning_tokens": {"type": "integer"}},
        },
    },
}
COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["chat.completion"]},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "message", "finish_reason", "logprobs"],
                "properties": {
                    "index": {"type": "integer"},
                    "message": {
                        "type": "object",
                        "required": ["role", "content"],
                        "properties": {
                            "role": {"type": "string", "enum": ["assistant"]},
                            "content": _TEXT,
                            "tool_calls": {"type": "array", "items": _CALL},
                            "reasoning_content": {"type": "string"},
                        },
                    },
                    "finish_reason": {"type": "string", "enum": ["stop", "length", "tool_calls"]},
                    "logprobs": {"type": "object", "nullable": True},
                    "allowed_mass": {
                        "type": "object",
                        "description": "corral's, when asked: the answer's min and mean",
                        "properties": {
                            "min": {"type": "number", "nullable": True},
                            "mean": {"type": "number", "nullable": True},
                        },
                    },
                },
            },
        },
        "usage": _USAGE,
    },
}
MODEL = {
    "type": "object",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["model"]},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
    },
}
MODELS = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"type": "string", "enum": ["list"]},
        "data": {"type": "array", "items": MODEL},
    },
}
_INT = {"type": "integer", "nullable": True}
FILE = {
    "type": "object",
    "required": ["id", "object", "bytes", "created_at", "filename", "purpose", "status"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["file"]},
        "bytes": {"type": "integer"},
        "created_at": {"type": "integer"},
        "filename": {"type": "string"},
        "purpose": {"type": "string", "enum": ["batch", "batch_output"]},
        "status": {"type": "string", "enum": ["processed"]},
        "status_details": _TEXT,
    },
}
_BATCH_ERROR = {
    "type": "object",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "param": _TEXT,
        "line": _INT,
    },
}
BATCH = {
    "type": "object",
    "required": [
        "id", "object", "endpoint", "input_file_id", "completion_window", "status",
        "created_at", "request_counts",
    ],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["batch"]},
        "endpoint": {"type": "string", "enum": ["/v1/chat/completions"]},
        "errors": {
            "type": "object",
            "nullable": True,
            "properties": {
                "object": {"type": "string", "enum": ["list"]},
                "data": {"type": "array", "items": _BATCH_ERROR},
            },
        },
        "input_file_id": {"type": "string"},
        "completion_window": {"type": "string", "enum": ["24h"]},
        "status": {
            "type": "string",
            "enum": [
                "validating", "failed", "in_progress", "finalizing", "completed", "expired",
                "cancelling", "cancelled",
            ],
        },
        "output_file_id": _TEXT,
        "error_file_id": _TEXT,
        **{
            f"{event}_at": _INT
            for event in (
                "created", "in_progress", "expires", "finalizing", "completed", "failed",
                "expired", "cancelling", "cancelled",
            )
        },
        "request_counts": {
            "type": "object",
            "required": ["total", "completed", "failed"],
            "properties": {
                "total": {"type": "integer"},
                "completed": {"type": "integer"},
                "failed": {"type": "integer"},
            },
        },
        "metadata": METADATA,
        "model": {"type": "string"},
    },
}  # fmt: skip
CREATE_BATCH = {
    "type": "object",
    "required": ["input_file_id", "endpoint", "completion_window"],
    "additionalProperties": False,
    "properties": {
        "input_file_id": {"type": "string"},
        "endpoint": {"type": "string", "enum": ["/v1/chat/completions"]},
        "completion_window": {"type": "string", "enum": ["24h"]},
        "metadata": METADATA,
    },
}


def _list(item: dict) -> dict:
    """A list object of `item`s, as the Batch API's list routes answer."""
    return {
        "type": "object",
        "required": ["object", "data", "has_more"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": item},
            "first_id": _TEXT,
            "last_id": _TEXT,
            "has_more": {"type": "boolean"},
        },
    }


def _param(name: str, where: str, schema: dict) -> dict:
    return {"name": name, "in": where, "required": where == "path", "schema": schema}


def _batch_paths(bearer: list) -> dict:
    """The Batch API's routes (`corral.tools.batch_service`)."""
    file_id = _param("file_id", "path", {"type": "string"})
    batch_id = _param("batch_id", "path", {"type": "string"})
    after = _param("after", "query", {"type": "string"})
    deleted = {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["file"]},
            "deleted": {"type": "boolean"},
        },
    }
    upload = {
        "type": "object",
        "required": ["file", "purpose"],
        "properties": {
            "file": {"type": "string", "format": "binary"},
            "purpose": {"type": "string", "enum": ["batch"]},
        },
    }
    return {
        "/v1/files": {
            "post": {
                "operationId": "createFile",
                "security": bearer,
                "requestBody": {
                    "required": True,
                    "content": {"multipart/form-data": {"schema": upload}},
                },
                "responses": {"200": _json(FILE, "the file"), **_errors(400, 401, 413, 415)},
            },
            "get": {
                "operationId": "listFiles",
                "security": bearer,
                "parameters": [
                    _param("purpose", "query", {"type": "string"}),
                    _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 10000}),
                    after,
                    _param("order", "query", {"type": "string", "enum": ["asc", "desc"]}),
                ],
                "responses": {"200": _json(_list(FILE), "the files"), **_errors(400, 401)},
            },
        },
        "/v1/files/{file_id}": {
            "get": {
                "operationId": "retrieveFile",
                "security": bearer,
                "parameters": [file_id],
                "responses": {"200": _json(FILE, "the file"), **_errors(401, 404)},
            },
            "delete": {
                "operationId": "deleteFile",
                "security": bearer,
                "parameters": [file_id],
                "responses": {"200": _json(deleted, "deleted"), **_errors(400, 401, 404)},
            },
        },
        "/v1/files/{file_id}/content": {
            "get": {
                "operationId": "downloadFile",
                "security": bearer,
                "parameters": [file_id],
                "responses": {
                    "200": {
                        "description": "the file's bytes (JSONL)",
                        "content": {
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            }
                        },
                    },
                    **_errors(401, 404),
                },
            }
        },
        "/v1/batches": {
            "post": {
                "operationId": "createBatch",
                "security": bearer,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": CREATE_BATCH}},
                },
                "responses": {
                    "200": _json(BATCH, "the batch"),
                    **_errors(400, 401, 404, 413, 415),
                },
            },
            "get": {
                "operationId": "listBatches",
                "security": bearer,
                "parameters": [
                    _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100}),
                    after,
                ],
                "responses": {"200": _json(_list(BATCH), "the batches"), **_errors(400, 401)},
            },
        },
        "/v1/batches/{batch_id}": {
            "get": {
                "operationId": "retrieveBatch",
                "security": bearer,
                "parameters": [batch_id],
                "responses": {"200": _json(BATCH, "the batch"), **_errors(401, 404)},
            }
        },
        "/v1/batches/{batch_id}/cancel": {
            "post": {
                "operationId": "cancelBatch",
                "security": bearer,
                "parameters": [batch_id],
                "responses": {"200": _json(BATCH, "the batch"), **_errors(400, 401, 404)},
            }
        },
    }


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict:
    return {str(status): _json(ERROR, "an error in OpenAI's shape") for status in statuses}


def document(model_name: str) -> dict:
    """The OpenAPI 3.0.3 document, a JSON-ready dict."""
    chat_ok = _json(COMPLETION, "a chat completion, or server-sent chunks when `stream` is true")
    chat_ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    bearer = [{"bearer": []}]
    # the served model's name, or none: another is a 404 model_not_found
    model = {"type": "string", "enum": [model_name]}
    request = {**REQUEST, "properties": {**REQUEST["properties"], "model": model}}
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "corral serve",
            "version": "1",
            "description": f"OpenAI-compatible chat completions with {model_name}.",
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/v1/chat/completions": {
                "post": {
                    "operationId": "createChatCompletion",
                    "security": bearer,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": request}},
                    },
                    "responses": {
                        "200": chat_ok,
                        **_errors(400, 401, 404, 413, 415, 422, 429, 500),
                    },
                }
            },
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "security": bearer,
                    "responses": {"200": _json(MODELS, "the served model"), **_errors(401)},
                }
            },
            "/v1/models/{model}": {
                "get": {
                    "operationId": "retrieveModel",
                    "security": bearer,
                    "parameters": [
                        {
                            "name": "model",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": {
                        "200": _json(MODEL, "the served model"),
                        **_errors(401, 404),
                    },
                }
            },
            **_batch_paths(bearer),
            "/health": {
                "get": {
                    "operationId": "health",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["status"],
                                "properties": {"status": {"type": "string"}},
                            },
                            "the server is up",
                        )
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "responses": {
                        "200": {
                            "description": "Prometheus text format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
        },
    }
