"""Third-party code vendored under its own licence, one folder per project (each with LICENSE and README.md)."""
