module gopeer

go 1.19
