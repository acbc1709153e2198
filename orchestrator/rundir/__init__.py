"""The run directory, one owner: its layout (layout.py), its guards and lock
(guard.py), its records of the sweep (records.py), each trial's rows (rows.py),
and the run read whole (run.py). No other module names a file in it, and no Ray
import: status, report and notebooks read a run with Ray not running.
"""

from orchestrator.rundir.guard import (Footprint, RunDirError, RunLock, blocked_files, check_launch_dir, check_report_dir,
                                       check_storage, claim_trial_dir, driver_is_live, record_report, report_owned)
from orchestrator.rundir.layout import (DRIVER_LOG, EARLIER_RESULTS, ERROR_FILE, FAILS_AGAIN, LOCK_FILE, MEMBER_FAILED,
                                        MLFLOW_FILE, OPTUNA_FILE, PARAMS_FILE, PLAN_FILE, PLOT_FILES, REPORT_FILES,
                                        RESULTS_FILE, SECRETS_FILE, SPEC_FILE, STARTED_OVER, STARTED_OVER_FILE, STOP_FILE,
                                        TRIAL_LOCK_FILE, TUNE_PICKLES, TUNER_FILE, WANDB_FAILED, is_trial_dir, small_text, sqlite_url, trial_names, trials_home)
from orchestrator.rundir.records import (RecordError, driver_ended, masked_secrets, read_plan, remove_half_written, record_driver_end, set_aside_for_rebuild,
                                         set_aside_plan, set_aside_results, spec_location,
                                         spec_record, tune_statuses,
                                         tune_trial_dirs, tune_trial_ids, tune_trial_records, tune_trials, write_plan,
                                         write_spec_record)
from orchestrator.rundir.rows import (METRIC_KEYS, TrialFiles, catch_up, parse_rows, read_results, repair_results, restore_rows,
                                      row_stored, set_aside_stored_rows, stored_rows)
from orchestrator.rundir.run import Run, load_trials, read_run

__all__ = ["DRIVER_LOG", "EARLIER_RESULTS", "ERROR_FILE", "FAILS_AGAIN", "Footprint", "LOCK_FILE", "MEMBER_FAILED",
           "METRIC_KEYS", "MLFLOW_FILE", "OPTUNA_FILE", "PARAMS_FILE", "PLAN_FILE", "PLOT_FILES", "REPORT_FILES",
           "RESULTS_FILE", "RecordError", "SECRETS_FILE", "TUNE_PICKLES", "TUNER_FILE", "Run", "RunDirError", "RunLock", "SPEC_FILE", "STARTED_OVER", "STARTED_OVER_FILE",
           "STOP_FILE", "TRIAL_LOCK_FILE", "TrialFiles", "WANDB_FAILED", "blocked_files", "catch_up",
           "check_launch_dir", "check_report_dir", "check_storage", "claim_trial_dir", "driver_ended",
           "driver_is_live", "is_trial_dir", "load_trials", "masked_secrets", "parse_rows", "read_plan", "read_results", "read_run",
           "record_driver_end", "record_report", "remove_half_written", "repair_results", "report_owned", "restore_rows", "row_stored",
           "set_aside_for_rebuild", "set_aside_plan", "set_aside_results", "set_aside_stored_rows", "small_text", "spec_location", "spec_record",
           "sqlite_url", "stored_rows", "trial_names", "trials_home", "tune_statuses", "tune_trial_dirs", "tune_trial_ids", "tune_trial_records", "tune_trials",
           "write_plan", "write_spec_record"]
