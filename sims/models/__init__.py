"""Models shipped with the package, in the model file layout of :mod:`ctmhsa.maths.model`:
``ctmhsa.load_model(name)`` reads ``<name>.npz``; ``<name>.json`` records how it was made and its
float accuracy. ``digits``: a one-block vision transformer for scikit-learn's 8×8 digits
(:mod:`ctmhsa.sims.digits`, trained by :mod:`ctmhsa.sims.models.train_digits`)."""
