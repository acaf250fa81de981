"""The command modules, in the order ``kvcal --help`` lists them."""

from kvcal.cli import (
    compare_cmd,
    emit_cmd,
    export_cmd,
    fit_cmd,
    history_cmd,
    k8s_cmd,
    plan_cmd,
    plot_cmd,
    predict_cmd,
    profiles_cmd,
    sweep_cmd,
)

ALL = [sweep_cmd, export_cmd, fit_cmd, plot_cmd, emit_cmd, compare_cmd, history_cmd, predict_cmd, plan_cmd, profiles_cmd, k8s_cmd]
