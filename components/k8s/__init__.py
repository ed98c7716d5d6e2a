"""Components of the Kubernetes stack (EKS with Karpenter and Kueue): one per file, ``parkbrake:k8s:<Name>``."""
