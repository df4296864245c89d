import pytest

from harness import data


@pytest.fixture(scope="session")
def fixture_corpus():
    return data.load_corpus()
