"""The OpenAI completions wire format: request validation and response bodies.

Pure (no torch, no I/O), so the load generator's tests and the server share one reading of it.
A request that cannot be served gets an OpenAI-style error naming the field:
  {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
             "code": null}}
Fields read: prompt (string, required), max_tokens (integer >= 1, default 16), temperature
(number 0..2, default 1 as in OpenAI's API; 0 is greedy), stream (boolean, default false),
seed (integer, optional: the same seed gives the same sampled text), model (string, optional;
must name the served model), n (only 1), stream_options.include_usage (boolean). Other fields
(top_p, stop, user, ...) are accepted and ignored, as clients send them by default.
"""

import json
import time
import uuid

DEFAULT_MAX_TOKENS = 16


class RequestError(Exception):
    """A request the server refuses: HTTP status, message and the offending field."""

    def __init__(self, status, message, param=None, kind="invalid_request_error", code=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.code = code

    def body(self):
        return error_body(self.message, self.param, self.kind, self.code)


def error_body(message, param=None, kind="invalid_request_error", code=None):
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class CompletionRequest:
    def __init__(self, prompt, max_tokens, temperature, stream, seed, include_usage):
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.stream = stream
        self.seed = seed
        self.include_usage = include_usage


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_request(raw, model_name):
    """A CompletionRequest from a request body (bytes), or raises RequestError."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"the request body is not valid JSON ({e}); send a JSON object "
                           "such as {\"prompt\": \"Hello\", \"max_tokens\": 16}")
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object, e.g. "
                           "{\"prompt\": \"Hello\", \"max_tokens\": 16}")

    model = body.get("model")
    if model is not None and model != model_name:
        raise RequestError(404, f"model: the model '{model}' does not exist; this server "
                           f"serves '{model_name}' (GET /v1/models), or leave model out",
                           "model", code="model_not_found")

    if "prompt" not in body:
        raise RequestError(400, "prompt: required; give the text to complete as a string",
                           "prompt")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # clients often send a batch of one
    if not isinstance(prompt, str):
        raise RequestError(400, f"prompt: must be a string (one prompt per request), got "
                           f"{type(prompt).__name__}", "prompt")

    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not _is_int(max_tokens):
        raise RequestError(400, f"max_tokens: must be an integer, got "
                           f"{type(max_tokens).__name__} {json.dumps(max_tokens)}", "max_tokens")
    if max_tokens < 1:
        raise RequestError(400, f"max_tokens: must be at least 1, got {max_tokens}", "max_tokens")

    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if not _is_number(temperature):
        raise RequestError(400, f"temperature: must be a number from 0 to 2, got "
                           f"{type(temperature).__name__} {json.dumps(temperature)}",
                           "temperature")
    if not 0 <= temperature <= 2:
        raise RequestError(400, f"temperature: must be from 0 to 2 (0 is greedy), got "
                           f"{temperature}", "temperature")

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError(400, f"stream: must be true or false, got {json.dumps(stream)}",
                           "stream")

    seed = body.get("seed")
    if seed is not None and (not _is_int(seed) or not 0 <= seed < 2**63):
        raise RequestError(400, f"seed: must be a non-negative integer below 2^63, got "
                           f"{json.dumps(seed)}", "seed")

    n = body.get("n", 1)
    if n is not None and n != 1:
        raise RequestError(400, f"n: this server makes one completion per request; send n = 1 "
                           f"or leave it out (got {json.dumps(n)})", "n")

    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise RequestError(400, "stream_options: must be an object such as "
                               "{\"include_usage\": true}", "stream_options")
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise RequestError(400, "stream_options.include_usage: must be true or false",
                               "stream_options.include_usage")

    return CompletionRequest(prompt, max_tokens, float(temperature), stream, seed, include_usage)


class Completion:
    """Builds the response bodies of one completion (whole or streamed chunks)."""

    def __init__(self, model_name, prompt_tokens):
        self.id = "cmpl-" + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model_name
        self.prompt_tokens = prompt_tokens

    def _base(self):
        return {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model}

    def usage(self, completion_tokens):
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": self.prompt_tokens + completion_tokens}

    def whole(self, text, finish_reason, completion_tokens):
        body = self._base()
        body["choices"] = [{"text": text, "index": 0, "logprobs": None,
                            "finish_reason": finish_reason}]
        body["usage"] = self.usage(completion_tokens)
        return body

    def chunk(self, text, finish_reason=None):
        body = self._base()
        body["choices"] = [{"text": text, "index": 0, "logprobs": None,
                            "finish_reason": finish_reason}]
        return body

    def usage_chunk(self, completion_tokens):
        body = self._base()
        body["choices"] = []
        body["usage"] = self.usage(completion_tokens)
        return body
