"""One module per stage: the stage's entry function (`work`) and its KFP component."""
