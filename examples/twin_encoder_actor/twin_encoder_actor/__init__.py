"""An example downstream package: a custom policy actor for drl's FlashSAC."""
