"""Running the pipeline on this machine: LocalDagRunner, the compiled spec under kfp.local, the run
lock, the crontab schedule and the console that shows a run as it goes."""
