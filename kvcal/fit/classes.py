"""A campaign over several pairs, fitted per link class (``kvcal fit`` on a ``kvcal sweep --pairs`` run).

The top-level fit of such a run is every class's probes pooled: what a one-class reading
of the run would say, right only when the classes do not differ. ``classes`` holds each
class's own fit (its probes alone: curves, break-even, interval, session cost), which
``kvcal emit-config`` and ``kvcal fleet`` read; ``class_difference`` tests whether one pull
curve serves every class (an F test of one affine pull curve against one per class, on
relative residuals, as the curves are fitted): when it does not reject, the classes may
be pooled and the top-level fit used alone.

A probe CSV exported from such a run (``kvcal export``, its ``pair`` and ``link_class``
columns) is fitted per class the same way (:func:`with_table_classes`), from its rows: the
same curves and break-evens, without the session cost (the export leaves the cold pulls out).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from kvcal.errors import KvcalError
from kvcal.fit.fitting import fit_table
from kvcal.fit.session_cost import session_cost
from kvcal.fit.tables import ProbeTable, load_class_table
from kvcal.records.fit import ClassFit, FitResult, FitSettings
from kvcal.records.fit_links import ClassDifference
from kvcal.records.run import ProbeRecord
from kvcal.records.run_folder import RunFolder, run_folders_in

TEST_NAME = "F test: one affine pull curve for every class against one per class (relative residuals)"


def with_links(
    result: FitResult, folder: Path, settings: FitSettings, *, busy_queue_threshold: int | None
) -> FitResult:
    """``result`` (the run's pooled fit) with its session cost and, for two classes or more, each class's fit
    (``folder``: a run folder, or a folder of run folders, one a pair)."""
    records = [r for path in run_folders_in(folder) for r in RunFolder(path).read_probes()]
    update: dict[str, object] = {"session_cost": session_cost(records, result.pull, result.confidence)}
    names = sorted({r.link_class for r in records if r.link_class is not None})
    if len(names) >= 2:
        update.update(
            _per_class(
                result,
                {name: partial(load_class_table, folder, name) for name in names},
                lambda name, table: class_fit(
                    fit_table(table, settings, busy_queue_threshold=busy_queue_threshold),
                    [r for r in records if r.link_class == name],
                    _pairs_of(folder, name),
                ),
            )
        )
    return result.model_copy(update=update)


def with_table_classes(
    result: FitResult, table: ProbeTable, settings: FitSettings, *, busy_queue_threshold: int | None
) -> FitResult:
    """``result`` (the table's pooled fit) with each class's fit when the rows carry two link classes or more."""
    names = table.link_classes()
    if len(names) < 2:
        return result
    update = _per_class(
        result,
        {name: partial(table.of_class, name) for name in names},
        lambda name, rows: class_fit(
            fit_table(rows, settings, busy_queue_threshold=busy_queue_threshold),
            [],  # no cold pulls in a probe table: no session cost
            sorted({p for p in rows.probes["pair"] if p is not None}),
        ),
    )
    return result.model_copy(update=update)


def _per_class(
    result: FitResult,
    tables: dict[str, Callable[[], ProbeTable]],
    fitted: Callable[[str, ProbeTable], ClassFit],
) -> dict[str, object]:
    """Each class's fit (``fitted`` on its table), the test of whether they differ, and the warning when they do."""
    fits, pulls = {}, {}
    for name, table_of in tables.items():
        try:
            table = table_of()
            fits[name] = fitted(name, table)
        except KvcalError as err:
            raise type(err)(f"link class {name}: {err}") from None
        pulls[name] = table.leg("pull")
    difference = class_difference(pulls, result.confidence)
    update: dict[str, object] = {"classes": fits, "class_difference": difference}
    if difference is not None and difference.differ:
        update["warnings"] = [
            *result.warnings,
            f"the link classes' pull curves differ ({difference.test}, p="
            f"{difference.p_value:.2g}): the top-level fit pools them; read each class's "
            "(kvcal emit-config --class-mix)",
        ]
    return update


def class_fit(fit: FitResult, records: list[ProbeRecord], pairs: list[str]) -> ClassFit:
    """One class's entry: the contract's figures, read off its own fit and cold pulls."""
    cost = session_cost(records, fit.pull, fit.confidence)
    fit = fit.model_copy(update={"session_cost": cost})
    return ClassFit(
        pairs=pairs,
        break_even_tokens=fit.break_even_tokens,
        break_even_ci=fit.break_even_ci,
        pull_fixed_ms=fit.pull.intercept_ms,
        pull_us_per_token=fit.pull.per_token_us,
        session_cost_ms=cost.value_ms if cost else None,
        session_cost_ci=cost.ci if cost else None,
        fit=fit,
    )


def class_difference(pulls: dict[str, pd.DataFrame], confidence: float) -> ClassDifference | None:
    """Whether the classes' warm pull curves differ; None when a class has too few pulls to say (under 3)."""
    if len(pulls) < 2 or any(len(rows) < 3 for rows in pulls.values()):
        return None
    separate = sum(_relative_rss(rows) for rows in pulls.values())
    pooled = _relative_rss(pd.concat(list(pulls.values()), ignore_index=True))
    n = sum(len(rows) for rows in pulls.values())
    extra, left = 2 * (len(pulls) - 1), n - 2 * len(pulls)
    if left <= 0:
        return None
    statistic = ((pooled - separate) / extra) / max(separate / left, 1e-300)
    p_value = float(stats.f.sf(statistic, extra, left))
    return ClassDifference(
        test=TEST_NAME,
        statistic=round(float(statistic), 4),
        p_value=p_value,
        differ=p_value < 1 - confidence,
        classes=sorted(pulls),
    )


def _relative_rss(rows: pd.DataFrame) -> float:
    """Residual sum of squares of an affine fit weighted by 1/t^2 (relative errors)."""
    n = rows["prefix_tokens"].to_numpy(float)
    t = rows["ttft_ms"].to_numpy(float)
    design = np.column_stack([np.ones_like(n), n]) / t[:, None]
    coef, *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(np.sum((design @ coef - 1.0) ** 2))


def _pairs_of(folder: Path, name: str) -> list[str]:
    """The campaign's pairs of class ``name``, as its run folders' settings list them."""
    manifests = [RunFolder(path).manifest() for path in run_folders_in(folder)]
    return sorted({p.name for m in manifests for p in m.settings.pairs or () if p.link_class == name})
