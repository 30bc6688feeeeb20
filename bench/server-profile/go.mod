module fleet/bench/serverprofile

go 1.21
