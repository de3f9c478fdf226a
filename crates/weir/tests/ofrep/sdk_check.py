"""Reads weir's flags through the real OpenFeature Python SDK and its OFREP provider.

Usage: python sdk_check.py BASE_URL SPLIT_KEYS
Prints one JSON object with what the SDK returned, for the Rust test to check.
"""

import json
import sys
from collections import Counter

from openfeature import api
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext


def details(evaluation):
    return {
        "value": evaluation.value,
        "variant": evaluation.variant,
        "reason": str(evaluation.reason.value if hasattr(evaluation.reason, "value") else evaluation.reason)
        if evaluation.reason is not None
        else None,
        "error": evaluation.error_code.value if evaluation.error_code is not None else None,
    }


def main():
    base_url, split_keys = sys.argv[1], int(sys.argv[2])
    api.set_provider(OFREPProvider(base_url=base_url))
    client = api.get_client()
    out = {}
    out["boolean"] = details(
        client.get_boolean_details("new-checkout", False, EvaluationContext("user-1"))
    )
    out["string"] = details(
        client.get_string_details("greeting", "none", EvaluationContext("user-1"))
    )
    out["object"] = details(
        client.get_object_details("limits", {}, EvaluationContext("user-1"))
    )
    out["targeted"] = details(
        client.get_boolean_details(
            "new-checkout", False, EvaluationContext("user-2", {"country": "DE"})
        )
    )
    out["missing"] = details(
        client.get_boolean_details("no-such-flag", True, EvaluationContext("user-1"))
    )
    out["no_key"] = details(client.get_string_details("banner", "none", EvaluationContext()))
    shares = Counter()
    reasons = Counter()
    for i in range(split_keys):
        evaluation = client.get_string_details("banner", "none", EvaluationContext(f"user-{i}"))
        shares[evaluation.value] += 1
        reasons[details(evaluation)["reason"]] += 1
    out["split"] = {"shares": dict(shares), "reasons": dict(reasons)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
