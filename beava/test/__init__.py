"""Test utilities for beava pipelines (spec/sdk.md §11)::

    from beava.test import fixture, replay, assert_features_eq, MockApp
"""

from beava.test.assertions import assert_features_eq
from beava.test.fixtures import fixture, replay
from beava.test.mock_app import MockApp

__all__ = ["MockApp", "assert_features_eq", "fixture", "replay"]
