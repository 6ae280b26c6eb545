"""`kernelswarm import-kt SCRIPT.py [-o DIR]`: a Kernel Tuner tuning script becomes a goal
directory (app.kt_import.importer: import_script, ImportRefused).

This package imports nothing itself: a script's sandbox cell starts from app.kt_import.cell and
must still be single-threaded when it enters its walls (numpy starts OpenBLAS's threads at
import, and a process with threads cannot enter a user namespace, so a user who is not root
would get no network namespace and the import would be refused).
"""
