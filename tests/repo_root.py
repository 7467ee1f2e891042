"""The checkout's root directory, for tests at any depth below tests/ (tests/conftest.py puts tests/ on sys.path)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
