"""The control loop: perceive → update the world model → reconcile → act, every tick.

- ``actions``: what reconcilers ask for (typed actions with stable keys, plans);
- ``view``: the immutable view a reconciler reads; ``reconciler``: the Reconciler and
  Actuator protocols and outcomes;
- ``world`` and ``forecasts``: the world model (state, pods, DRTG, forecast panel);
- ``control``: the ``ControlLoop``; ``clock``, ``budgets``, ``audit``, ``report`` and
  ``settings``: its parts.

See docs/loop.md.
"""
