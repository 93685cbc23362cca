import pytest

from participant import CollectionSpec, Feature

# Table 1 of the paper: (age, income, gender, missed payment).
TABLE_1 = [
    ("Young", "Low", "Male", "Yes"),
    ("Young", "High", "Female", "Yes"),
    ("Medium", "High", "Male", "No"),
    ("Old", "Medium", "Male", "No"),
    ("Old", "High", "Male", "No"),
    ("Old", "Low", "Female", "Yes"),
    ("Medium", "Low", "Female", "No"),
    ("Medium", "Medium", "Male", "Yes"),
    ("Young", "Low", "Male", "No"),
    ("Old", "High", "Female", "No"),
]


def table_1_spec(protocol="DE", epsilon=1.0, **kwargs) -> CollectionSpec:
    """The paper's example: classes C1 = missed a payment (Yes), C2 = did not (No)."""
    return CollectionSpec(
        features=[
            Feature("age", ["Young", "Medium", "Old"]),
            Feature("income", ["Low", "Medium", "High"]),
            Feature("gender", ["Male", "Female"]),
        ],
        classes=["Yes", "No"],
        protocol=protocol,
        epsilon=epsilon,
        label="missed_payment",
        **kwargs,
    )


@pytest.fixture
def spec():
    return table_1_spec()
