"""A live slice's inventory: bad ones are rejected naming the field."""
import pytest

from harness import inventory
from harness.errors import BadInput


@pytest.mark.parametrize("text, field", [
    ('[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n', "ray_address"),
    ('ray_address = "10.0.0.1:6379"\nplatform = "tpu"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n',
     "field 'platform' must be one of gpu, cpu"),
    ('ray_address = "10.0.0.1"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n', "field 'ray_address'"),
    ('ray_address = "10.0.0.1:6379"\n', "vm"),
    ('ray_address = "10.0.0.1:6379"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "Z80"\n', "gpu"),
])
def test_bad_inventory_names_the_field(tmp_path, text, field):
    path = tmp_path / "inv.toml"
    path.write_text(text)
    with pytest.raises(BadInput, match=field):
        inventory.load(str(path))
