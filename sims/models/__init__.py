"""Models shipped with the package, in the model file layout of :mod:`ctmhsa.maths.model`:
``ctmhsa.load_model(name)`` reads ``<name>.npz``; ``<name>.json`` records how it was made and its
float accuracy. ``digits``: a one-block vision transformer for scikit-learn's 8×8 digits
(:mod:`ctmhsa.sims.digits`, trained by :mod:`ctmhsa.sims.models.train_digits`). ``recall``: a
one-block causal key-value-memory model for in-context recall (:mod:`ctmhsa.sims.recall`, trained
by :mod:`ctmhsa.sims.models.train_recall`). ``shakespeare``: a two-block causal character model
of Shakespeare's plays with the circuit's unnormalised key-value memory, λ = 0.5
(:mod:`ctmhsa.sims.language`, trained by :mod:`ctmhsa.sims.models.train_shakespeare`; the cleaned
text ships as ``shakespeare.txt.xz``)."""
